package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// volumeWorld is a Pod worker whose runner talks to an in-memory API.
func volumeWorld(t *testing.T, objects ...any) (*podWorker, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *corev1.Secret:
			_, err = client.CoreV1().Secrets(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = client.CoreV1().ConfigMaps(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	recorder := record.NewFakeRecorder(10)
	r := &podRunner{ctx: context.Background(), client: client, node: "sluice-node", nodeIP: "127.0.0.1", recorder: recorder}
	return &podWorker{r: r, dir: t.TempDir()}, client, recorder
}

// tlsBackend is the conformance suite's tls-backend Pod: a Secret volume
// with items, and a ConfigMap volume with defaultMode, as coredns has.
func tlsBackend() *corev1.Pod {
	mode := int32(0o440)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gateway-conformance-infra", Name: "tls-backend-1", Labels: map[string]string{"app": "tls-backend"}},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls-checks-certificate",
				Items:      []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
			}}},
			{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}, DefaultMode: &mode,
			}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}},
		}},
	}
}

func readVolumeFile(t *testing.T, w *podWorker, volume, name string) (string, os.FileMode) {
	t.Helper()
	p := filepath.Join(w.dir, "volumes", volume, name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data), info.Mode().Perm()
}

func TestMakeVolumesWaitsForAMissingSecretThenWritesItsItems(t *testing.T) {
	corefile := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gateway-conformance-infra", Name: "coredns"}, Data: map[string]string{"Corefile": ".:53 {}"}}
	w, client, recorder := volumeWorld(t, corefile)
	pod := tlsBackend()

	err := w.makeVolumes(context.Background(), pod)
	var notReady errVolumeNotReady
	if !errors.As(err, &notReady) || !strings.Contains(err.Error(), `secret "tls-checks-certificate" not found`) {
		t.Fatalf("want a volume that is not ready yet, naming the Secret; got %v", err)
	}
	// The suite creates the Secret after the Deployment.
	_, err = client.CoreV1().Secrets("gateway-conformance-infra").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gateway-conformance-infra", Name: "tls-checks-certificate"},
		Data:       map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.makeVolumes(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		volume, name, data string
		mode               os.FileMode
	}{
		{"secret-volume", "crt", "CERT", 0o644},
		{"secret-volume", "key", "KEY", 0o644},
		{"conf", "Corefile", ".:53 {}", 0o440},
		{"info", "name", "tls-backend-1", 0o644},
		{"info", "labels", `app="tls-backend"`, 0o644},
	} {
		data, mode := readVolumeFile(t, w, c.volume, c.name)
		if data != c.data || mode != c.mode {
			t.Errorf("%s/%s: got %q %v, want %q %v", c.volume, c.name, data, mode, c.data, c.mode)
		}
	}
	if _, err := os.Stat(filepath.Join(w.dir, "volumes", "host")); !os.IsNotExist(err) {
		t.Errorf("a hostPath volume got a directory: %v", err)
	}
	// One Warning for the hostPath volume, however many tries it took.
	if n := len(recorder.Events); n != 1 {
		t.Fatalf("want 1 Event, got %d", n)
	}
	if e := <-recorder.Events; !strings.Contains(e, "FailedMount") || !strings.Contains(e, `"host"`) {
		t.Fatalf("want a FailedMount Warning naming the hostPath volume, got %q", e)
	}
}

func TestMakeVolumesSkipsAnOptionalSecretThatIsMissing(t *testing.T) {
	w, _, _ := volumeWorld(t)
	optional := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec:       corev1.PodSpec{Volumes: []corev1.Volume{{Name: "maybe", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: &optional}}}}},
	}
	if err := w.makeVolumes(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, filepath.Join(w.dir, "volumes", "maybe")); len(got) != 0 {
		t.Fatalf("want an empty volume, got %v", got)
	}
}
