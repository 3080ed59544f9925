package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestKeyFilesTakesEveryKeyOrOnlyTheItemsAtTheirPathsAndModes(t *testing.T) {
	data := map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY"), "ca.crt": []byte("CA")}
	all, err := keyFiles(data, nil, 0o644, false, `secret "s"`)
	if err != nil {
		t.Fatal(err)
	}
	want := []volumeFile{
		{path: "ca.crt", data: []byte("CA"), mode: 0o644},
		{path: "tls.crt", data: []byte("CERT"), mode: 0o644},
		{path: "tls.key", data: []byte("KEY"), mode: 0o644},
	}
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("every key: got %+v, want %+v", all, want)
	}
	keyMode := int32(0o600)
	items, err := keyFiles(data, []corev1.KeyToPath{
		{Key: "tls.crt", Path: "crt"},
		{Key: "tls.key", Path: "private/key", Mode: &keyMode},
	}, 0o640, false, `secret "s"`)
	if err != nil {
		t.Fatal(err)
	}
	want = []volumeFile{
		{path: "crt", data: []byte("CERT"), mode: 0o640},
		{path: "private/key", data: []byte("KEY"), mode: 0o600},
	}
	if !reflect.DeepEqual(items, want) {
		t.Fatalf("items: got %+v, want %+v", items, want)
	}
}

func TestKeyFilesRefusesAMissingItemUnlessTheSourceIsOptional(t *testing.T) {
	data := map[string][]byte{"a": []byte("1")}
	items := []corev1.KeyToPath{{Key: "a", Path: "a"}, {Key: "missing", Path: "m"}}
	if _, err := keyFiles(data, items, 0o644, false, `configmap "c"`); err == nil || !strings.Contains(err.Error(), `no key "missing"`) {
		t.Fatalf("want an error naming the missing key, got %v", err)
	}
	files, err := keyFiles(data, items, 0o644, true, `configmap "c"`)
	if err != nil || len(files) != 1 || files[0].path != "a" {
		t.Fatalf("optional: got %+v, %v; want only a", files, err)
	}
}

func TestWriteVolumeWritesFilesWithTheirModesAndReplacesOldContents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes", "secret-volume")
	if err := writeVolume(dir, []volumeFile{{path: "stale", data: []byte("x"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	err := writeVolume(dir, []volumeFile{
		{path: "crt", data: []byte("CERT"), mode: 0o644},
		{path: "private/key", data: []byte("KEY"), mode: 0o600},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		data string
		mode os.FileMode
	}{"crt": {"CERT", 0o644}, "private/key": {"KEY", 0o600}} {
		p := filepath.Join(dir, name)
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want.data {
			t.Fatalf("%s: got %q, %v; want %q", name, got, err, want.data)
		}
		info, _ := os.Stat(p)
		if info.Mode().Perm() != want.mode {
			t.Errorf("%s: mode %v, want %v", name, info.Mode().Perm(), want.mode)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stale")); !os.IsNotExist(err) {
		t.Errorf("a file of the volume's earlier contents is still there: %v", err)
	}
}

func TestWriteVolumeRefusesPathsOutsideTheVolume(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"../escape", "/etc/passwd", "a/../../escape", ""} {
		if err := writeVolume(filepath.Join(dir, "v"), []volumeFile{{path: p, data: []byte("x"), mode: 0o644}}); err == nil {
			t.Errorf("path %q was written", p)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); !os.IsNotExist(err) {
		t.Fatalf("a file escaped the volume: %v", err)
	}
}

func TestContainerMountsBindsVolumeDirectoriesReadOnlyForSecretsAndWithSubPaths(t *testing.T) {
	w := &podWorker{dir: t.TempDir()}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}},
	}}}
	c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{
		{Name: "secret-volume", MountPath: "/etc/secret-volume"},
		{Name: "conf", MountPath: "/root"},
		{Name: "scratch", MountPath: "/data/cache/"},
		{Name: "scratch", MountPath: "/logs", SubPathExpr: "$(POD_NAME)"},
		{Name: "host", MountPath: "/var/log"},
	}}
	got, err := w.containerMounts(pod, c, []string{"POD_NAME=web-1"})
	if err != nil {
		t.Fatal(err)
	}
	vol := func(name string) string { return filepath.Join(w.dir, "volumes", name) }
	want := []podMount{
		{Source: vol("secret-volume"), Target: "/etc/secret-volume", ReadOnly: true},
		{Source: vol("conf"), Target: "/root", ReadOnly: true},
		{Source: vol("scratch"), Target: "/data/cache"},
		{Source: filepath.Join(vol("scratch"), "web-1"), Target: "/logs"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if info, err := os.Stat(filepath.Join(vol("scratch"), "web-1")); err != nil || !info.IsDir() {
		t.Fatalf("the missing subPath was not made a directory: %v", err)
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/x", SubPath: "../../etc"}}
	if _, err := w.containerMounts(pod, c, nil); err == nil {
		t.Fatal("a subPath leaving the volume was accepted")
	}
}
