package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerEnv is a container's environment as the kubelet builds it: a
// PATH, HOSTNAME, then envFrom, then env in order, with `$(VAR)` references
// to earlier variables expanded, and values from the downward API
// (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
// metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
// status.podIP, status.podIPs, status.hostIP, status.hostIPs), ConfigMaps
// and Secrets.
func (r *podRunner) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, podIP string) ([]string, error) {
	values := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, seen := values[name]; !seen {
			order = append(order, name)
		}
		values[name] = value
	}
	set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	set("HOSTNAME", pod.Name)
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for _, k := range sorted(keys(data)) {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, values))
			continue
		}
		value, err := r.envValue(ctx, pod, e.ValueFrom, podIP)
		if err != nil {
			return nil, fmt.Errorf("env %q: %w", e.Name, err)
		}
		if value != nil {
			set(e.Name, *value)
		}
	}
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+values[name])
	}
	return env, nil
}

var fieldKey = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.+)'\]$`)

// envValue resolves one valueFrom; nil for an optional reference that is absent.
func (r *podRunner) envValue(ctx context.Context, pod *corev1.Pod, from *corev1.EnvVarSource, podIP string) (*string, error) {
	str := func(s string) *string { return &s }
	switch {
	case from.FieldRef != nil:
		switch path := from.FieldRef.FieldPath; path {
		case "metadata.name":
			return str(pod.Name), nil
		case "metadata.namespace":
			return str(pod.Namespace), nil
		case "metadata.uid":
			return str(string(pod.UID)), nil
		case "spec.nodeName":
			return str(r.node), nil
		case "spec.serviceAccountName":
			return str(pod.Spec.ServiceAccountName), nil
		case "status.podIP", "status.podIPs":
			return str(podIP), nil
		case "status.hostIP", "status.hostIPs":
			return str(r.nodeIP), nil
		default:
			if m := fieldKey.FindStringSubmatch(path); m != nil {
				if m[1] == "labels" {
					return str(pod.Labels[m[2]]), nil
				}
				return str(pod.Annotations[m[2]]), nil
			}
			return nil, fmt.Errorf("field %q is not supported", path)
		}
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if optional {
				return nil, nil
			}
			return nil, fmt.Errorf("configmap %q not found", ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return nil, nil
			}
			return nil, fmt.Errorf("key %q not found in configmap %q", ref.Key, ref.Name)
		}
		return &v, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if optional {
				return nil, nil
			}
			return nil, fmt.Errorf("secret %q not found", ref.Name)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return nil, nil
			}
			return nil, fmt.Errorf("key %q not found in secret %q", ref.Key, ref.Name)
		}
		return str(string(v)), nil
	case from.ResourceFieldRef != nil:
		return str("0"), nil
	}
	return nil, fmt.Errorf("unsupported valueFrom")
}

var reference = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand replaces `$(NAME)` with a defined variable's value and `$$` with
// `$`, leaving undefined references as they are (the kubelet's rules).
func expand(s string, values map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return reference.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := values[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func expandArgs(args []string, env []string) []string {
	values := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		values[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, values)
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
