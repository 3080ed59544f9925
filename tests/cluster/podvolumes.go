package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Pod's volumes, as the kubelet's volume manager makes them: each volume
// is a directory `<pod dir>/volumes/<name>`, filled once when the Pod starts
// from the API (Secret, ConfigMap, downward API, projected with a bound
// ServiceAccount token) or left empty (emptyDir), and each container's
// volumeMounts are bind mounts of those directories made by `pod-exec` in a
// private mount namespace of the container's own (see podexec.go), so that
// /etc/secret-volume or /root is the volume inside the container and the
// machine's own path is untouched.
//
// Unlike the kubelet, contents are not refreshed while the Pod runs, and a
// ServiceAccount token is not rotated (it is asked for with the volume's
// expirationSeconds, an hour by default). Other volume types (hostPath,
// persistentVolumeClaim, ephemeral, image, …) are not mounted: the Pod gets
// a Warning Event saying so, and the container sees the machine's path.

// volumeFile is one file of a volume: a relative path, its bytes and mode.
type volumeFile struct {
	path string
	data []byte
	mode os.FileMode
}

// errVolumeNotReady is a volume whose Secret, ConfigMap or ServiceAccount
// is not there yet: the kubelet reports FailedMount and tries again, and so
// does the runner (the conformance suite creates its Secrets after the
// Deployments that mount them).
type errVolumeNotReady struct{ err error }

func (e errVolumeNotReady) Error() string { return e.err.Error() }
func (e errVolumeNotReady) Unwrap() error { return e.err }

// defaultVolumeMode is the kubelet's default for Secret, ConfigMap,
// downward API and projected volumes (0644, `defaultMode: 420`).
const defaultVolumeMode = 0o644

func fileMode(mode *int32, fallback os.FileMode) os.FileMode {
	if mode == nil {
		return fallback
	}
	return os.FileMode(*mode) & os.ModePerm
}

// keyFiles selects the files of a Secret's or ConfigMap's data as the
// kubelet does: every key as a file of its name, or only the listed items at
// their paths (with their own mode, or the volume's); a listed key that is
// missing is an error unless the source is optional.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode, optional bool, what string) ([]volumeFile, error) {
	var files []volumeFile
	if len(items) == 0 {
		names := make([]string, 0, len(data))
		for k := range data {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			files = append(files, volumeFile{path: k, data: data[k], mode: mode})
		}
		return files, nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, item.Key)
		}
		files = append(files, volumeFile{path: item.Path, data: v, mode: fileMode(item.Mode, mode)})
	}
	return files, nil
}

func secretBytes(s *corev1.Secret) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range s.Data {
		out[k] = v
	}
	return out
}

func configMapBytes(cm *corev1.ConfigMap) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out
}

// writeVolume writes a volume's files into dir, which it empties first.
// Paths must be relative and stay inside dir (the apiserver validates this
// too: no `..` element, not absolute).
func writeVolume(dir string, files []volumeFile) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		clean := path.Clean(f.path)
		if f.path == "" || path.IsAbs(f.path) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("file path %q is not inside the volume", f.path)
		}
		target := filepath.Join(dir, filepath.FromSlash(clean))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, f.data, f.mode); err != nil {
			return err
		}
		// WriteFile's mode is filtered by the umask; the volume's is not.
		if err := os.Chmod(target, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// downwardFile is the content of a downward API file: the kubelet writes
// metadata.labels and metadata.annotations as sorted `key="value"` lines.
func (r *podRunner) downwardFile(pod *corev1.Pod, field *corev1.ObjectFieldSelector, resource *corev1.ResourceFieldSelector) ([]byte, error) {
	if resource != nil {
		return []byte("0"), nil
	}
	if field == nil {
		return nil, errors.New("a downward API item needs fieldRef or resourceFieldRef")
	}
	lines := func(m map[string]string) []byte {
		var b strings.Builder
		for _, k := range sorted(keys(m)) {
			fmt.Fprintf(&b, "%s=%q\n", k, m[k])
		}
		return []byte(strings.TrimSuffix(b.String(), "\n"))
	}
	switch field.FieldPath {
	case "metadata.labels":
		return lines(pod.Labels), nil
	case "metadata.annotations":
		return lines(pod.Annotations), nil
	}
	v, err := r.envValue(context.Background(), pod, &corev1.EnvVarSource{FieldRef: field}, "")
	if err != nil {
		return nil, err
	}
	return []byte(*v), nil
}

func (r *podRunner) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode os.FileMode) ([]volumeFile, error) {
	var files []volumeFile
	for _, item := range items {
		data, err := r.downwardFile(pod, item.FieldRef, item.ResourceFieldRef)
		if err != nil {
			return nil, fmt.Errorf("downward API file %q: %w", item.Path, err)
		}
		files = append(files, volumeFile{path: item.Path, data: data, mode: fileMode(item.Mode, mode)})
	}
	return files, nil
}

func (r *podRunner) secretFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, mode os.FileMode, optional *bool) ([]volumeFile, error) {
	opt := optional != nil && *optional
	s, err := r.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && opt:
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, errVolumeNotReady{fmt.Errorf("secret %q not found", name)}
	case err != nil:
		return nil, errVolumeNotReady{fmt.Errorf("get secret %q: %w", name, err)}
	}
	files, err := keyFiles(secretBytes(s), items, mode, opt, fmt.Sprintf("secret %q", name))
	if err != nil {
		// A key may yet be added: the kubelet tries again too.
		return nil, errVolumeNotReady{err}
	}
	return files, nil
}

func (r *podRunner) configMapFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, mode os.FileMode, optional *bool) ([]volumeFile, error) {
	opt := optional != nil && *optional
	cm, err := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && opt:
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, errVolumeNotReady{fmt.Errorf("configmap %q not found", name)}
	case err != nil:
		return nil, errVolumeNotReady{fmt.Errorf("get configmap %q: %w", name, err)}
	}
	files, err := keyFiles(configMapBytes(cm), items, mode, opt, fmt.Sprintf("configmap %q", name))
	if err != nil {
		// A key may yet be added: the kubelet tries again too.
		return nil, errVolumeNotReady{err}
	}
	return files, nil
}

// tokenFile asks for a ServiceAccount token bound to the Pod, as the
// kubelet does for a projected serviceAccountToken source.
func (r *podRunner) tokenFile(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, mode os.FileMode) (volumeFile, error) {
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	expiry := int64(3600)
	if src.ExpirationSeconds != nil {
		expiry = *src.ExpirationSeconds
	}
	var audiences []string
	if src.Audience != "" {
		audiences = []string{src.Audience}
	}
	tr, err := r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return volumeFile{}, errVolumeNotReady{fmt.Errorf("request a token for serviceaccount %q: %w", account, err)}
	}
	return volumeFile{path: src.Path, data: []byte(tr.Status.Token), mode: mode}, nil
}

// volumeSupported says whether the runner makes this kind of volume.
func volumeSupported(v *corev1.Volume) bool {
	return v.Secret != nil || v.ConfigMap != nil || v.EmptyDir != nil || v.DownwardAPI != nil || v.Projected != nil
}

// volumeReadOnly: the kubelet always mounts these kinds read-only.
func volumeReadOnly(v *corev1.Volume) bool {
	return v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil || v.Projected != nil
}

// volumeFiles reads what one volume holds; nil for an emptyDir.
func (r *podRunner) volumeFiles(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) ([]volumeFile, error) {
	switch {
	case v.Secret != nil:
		s := v.Secret
		return r.secretFiles(ctx, pod.Namespace, s.SecretName, s.Items, fileMode(s.DefaultMode, defaultVolumeMode), s.Optional)
	case v.ConfigMap != nil:
		c := v.ConfigMap
		return r.configMapFiles(ctx, pod.Namespace, c.Name, c.Items, fileMode(c.DefaultMode, defaultVolumeMode), c.Optional)
	case v.DownwardAPI != nil:
		return r.downwardFiles(pod, v.DownwardAPI.Items, fileMode(v.DownwardAPI.DefaultMode, defaultVolumeMode))
	case v.Projected != nil:
		mode := fileMode(v.Projected.DefaultMode, defaultVolumeMode)
		var files []volumeFile
		for _, src := range v.Projected.Sources {
			var more []volumeFile
			var err error
			switch {
			case src.Secret != nil:
				more, err = r.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, mode, src.Secret.Optional)
			case src.ConfigMap != nil:
				more, err = r.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, mode, src.ConfigMap.Optional)
			case src.DownwardAPI != nil:
				more, err = r.downwardFiles(pod, src.DownwardAPI.Items, mode)
			case src.ServiceAccountToken != nil:
				var f volumeFile
				f, err = r.tokenFile(ctx, pod, src.ServiceAccountToken, mode)
				more = []volumeFile{f}
			default:
				err = errors.New("only secret, configMap, downwardAPI and serviceAccountToken sources can be projected on the pod runner")
			}
			if err != nil {
				return nil, err
			}
			files = append(files, more...)
		}
		return files, nil
	}
	return nil, nil
}

// makeVolumes fills `<pod dir>/volumes/<name>` for each volume the runner
// supports, warning once about the others.
func (w *podWorker) makeVolumes(ctx context.Context, pod *corev1.Pod) error {
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; !volumeSupported(v) && !w.warnedVolumes {
			w.r.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedMount", "Volume %q is not mounted: the pod runner mounts only secret, configMap, emptyDir, downwardAPI and projected volumes", v.Name)
		}
	}
	w.warnedVolumes = true
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !volumeSupported(v) {
			continue
		}
		files, err := w.r.volumeFiles(ctx, pod, v)
		if err != nil {
			return fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", v.Name, err)
		}
		if err := writeVolume(filepath.Join(w.dir, "volumes", v.Name), files); err != nil {
			return fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", v.Name, err)
		}
		if v.EmptyDir != nil {
			if err := os.Chmod(filepath.Join(w.dir, "volumes", v.Name), 0o777); err != nil {
				return err
			}
		}
	}
	return nil
}

// podMount is one bind mount `pod-exec` makes for a container.
type podMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// containerMounts turns a container's volumeMounts into bind mounts of the
// Pod's volume directories (with subPath, or subPathExpr expanded from the
// container's environment).
func (w *podWorker) containerMounts(pod *corev1.Pod, c *corev1.Container, env []string) ([]podMount, error) {
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var mounts []podMount
	for _, vm := range c.VolumeMounts {
		v := volumes[vm.Name]
		if v == nil {
			return nil, fmt.Errorf("container %q mounts volume %q, which the Pod does not have", c.Name, vm.Name)
		}
		if !volumeSupported(v) {
			continue
		}
		if !path.IsAbs(vm.MountPath) {
			return nil, fmt.Errorf("container %q: mountPath %q is not absolute", c.Name, vm.MountPath)
		}
		source := filepath.Join(w.dir, "volumes", v.Name)
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expandArgs([]string{vm.SubPathExpr}, env)[0]
		}
		if sub != "" {
			clean := path.Clean(sub)
			if path.IsAbs(sub) || clean == ".." || strings.HasPrefix(clean, "../") {
				return nil, fmt.Errorf("container %q: subPath %q is not inside volume %q", c.Name, sub, v.Name)
			}
			source = filepath.Join(source, filepath.FromSlash(clean))
			if _, err := os.Lstat(source); errors.Is(err, os.ErrNotExist) {
				// The kubelet creates a missing subPath as a directory.
				if err := os.MkdirAll(source, 0o755); err != nil {
					return nil, err
				}
			}
		}
		mounts = append(mounts, podMount{Source: source, Target: path.Clean(vm.MountPath), ReadOnly: vm.ReadOnly || volumeReadOnly(v)})
	}
	return mounts, nil
}
