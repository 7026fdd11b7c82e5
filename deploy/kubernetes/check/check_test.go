// Package check validates deploy/kubernetes offline: every manifest
// decodes strictly (no unknown or misspelled field) into the k8s.io/api
// type of its kind, and the objects agree with each other and with
// breakerd (names, selectors, ports, the environment variables breakerd
// reads). It is a module of its own so that breakerd's go.mod does not
// carry the Kubernetes API.
package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests is the directory checked; docs is breakerd's flag table.
const (
	manifests = ".."
	docs      = "../../../docs/configuration.md"
)

// kinds maps each apiVersion/kind the manifests may use to a new value of
// its type.
var kinds = map[string]func() any{
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// decode reads every YAML document in the directory strictly.
func decode(t *testing.T, dir string) map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	objs := map[string]any{} // "Kind/name" -> object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			key, obj, err := decodeOne([]byte(doc))
			if err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i+1, err)
				continue
			}
			if _, dup := objs[key]; dup {
				t.Errorf("%s: %s is defined twice", filepath.Base(f), key)
			}
			objs[key] = obj
		}
	}
	return objs
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

// decodeOne decodes one document into its kind's type, refusing unknown
// fields, and returns "Kind/name".
func decodeOne(doc []byte) (string, any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return "", nil, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return "", nil, fmt.Errorf("apiVersion %q kind %q is not one this check knows", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return "", nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	name := obj.(metav1.Object).GetName()
	if name == "" {
		return "", nil, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return tm.Kind + "/" + name, obj, nil
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := decode(t, manifests)
	for _, want := range []string{"Deployment/breakerd", "Service/breakerd", "PodDisruptionBudget/breakerd", "ConfigMap/breakerd-policy", "Secret/breakerd-secrets"} {
		if _, ok := objs[want]; !ok {
			t.Errorf("no %s among the manifests", want)
		}
	}
}

// TestDecodeRefusesUnknownFields: the check fails on a misspelled field.
func TestDecodeRefusesUnknownFields(t *testing.T) {
	doc := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {minAvailabel: 1}\n"
	if _, _, err := decodeOne([]byte(doc)); err == nil || !strings.Contains(err.Error(), "minAvailabel") {
		t.Errorf("decodeOne(misspelled field) = %v, want an error naming minAvailabel", err)
	}
	if _, _, err := decodeOne([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")); err == nil {
		t.Error("decodeOne(an unexpected kind) = nil, want an error")
	}
}

// TestManifestsAgree: the Deployment's selectors, volumes, probes and
// environment fit the other objects and breakerd.
func TestManifestsAgree(t *testing.T) {
	objs := decode(t, manifests)
	d, ok := objs["Deployment/breakerd"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment/breakerd")
	}
	labels := d.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !matches(d.Spec.Selector.MatchLabels) {
		t.Error("the Deployment's selector does not match its pods' labels")
	}
	if svc := objs["Service/breakerd"].(*corev1.Service); !matches(svc.Spec.Selector) {
		t.Error("Service/breakerd does not select the Deployment's pods")
	}
	if pdb := objs["PodDisruptionBudget/breakerd"].(*policyv1.PodDisruptionBudget); pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Error("PodDisruptionBudget/breakerd does not select the Deployment's pods")
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			if _, ok := objs["ConfigMap/"+v.ConfigMap.Name]; !ok {
				t.Errorf("volume %s names ConfigMap %s, which no manifest defines", v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			// breakerd-tls comes from cert-manager or kubectl (secret.yaml says how).
			if _, ok := objs["Secret/"+v.Secret.SecretName]; !ok && v.Secret.SecretName != "breakerd-tls" {
				t.Errorf("volume %s names Secret %s, which no manifest defines", v.Name, v.Secret.SecretName)
			}
			if m := v.Secret.DefaultMode; m == nil || *m&0o022 != 0 {
				t.Errorf("volume %s: breakerd refuses secret files that group or others may write; set defaultMode 0440", v.Name)
			}
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["BREAKERD_TLS_CERT"] != "" {
		if p := c.ReadinessProbe; p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "/usr/local/bin/healthcheck") {
			t.Error("with TLS on, readiness must be an exec probe running /usr/local/bin/healthcheck: the kubelet's gRPC probe cannot speak TLS")
		}
	} else if p := c.ReadinessProbe; p == nil || (p.GRPC == nil && p.Exec == nil) {
		t.Error("readiness must ask grpc.health.v1 (a grpc probe, or the healthcheck binary)")
	}
	if env["BREAKERD_TOKENS"] == "" && !strings.HasPrefix(env["BREAKERD_LISTEN"], "127.") {
		t.Error("a non-loopback BREAKERD_LISTEN needs BREAKERD_TOKENS (breakerd refuses to start otherwise)")
	}
	table, err := os.ReadFile(docs)
	if err != nil {
		t.Fatal(err)
	}
	for name := range env {
		if !bytes.Contains(table, []byte("`"+name+"`")) {
			t.Errorf("the Deployment sets %s, which docs/configuration.md's flag table does not list", name)
		}
	}
}
