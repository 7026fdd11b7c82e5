package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/yamlfile"
)

// TestSecurityComposeGivesEachWorkerItsOwnToken (M9): scripts/compose-secrets.sh gives
// each worker identity its own token bound to that one id, never a glob
// one holder could use to be a quorum of workers alone.
func TestSecurityComposeGivesEachWorkerItsOwnToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("bash", "../../scripts/compose-secrets.sh", dir)
	cmd.Env = append(os.Environ(), "WORKERS=agent-1 agent-2 agent-3")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Parse(b); err != nil {
		t.Fatalf("tokens.yaml does not load: %v\n%s", err, b)
	}
	var f struct {
		Tokens []struct {
			Name        string   `yaml:"name"`
			Role        string   `yaml:"role"`
			TokenSHA256 string   `yaml:"token_sha256"`
			Workers     []string `yaml:"workers"`
		} `yaml:"tokens"`
	}
	if err := yamlfile.Decode(b, &f); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, tk := range f.Tokens {
		if tk.Role != "worker" {
			continue
		}
		if len(tk.Workers) != 1 || strings.ContainsAny(tk.Workers[0], "*?[") || ids[tk.Workers[0]] {
			t.Errorf("token %s may act as %q, want one worker id of its own", tk.Name, tk.Workers)
			continue
		}
		ids[tk.Workers[0]] = true
	}
	for _, want := range []string{"worker-mcp-1", "agent-1", "agent-2", "agent-3"} {
		if !ids[want] {
			t.Errorf("no token for worker %s; tokens.yaml:\n%s", want, b)
		}
		if want != "worker-mcp-1" {
			if _, err := os.Stat(filepath.Join(dir, "worker-"+want+"-token")); err != nil {
				t.Errorf("no token file for worker %s: %v", want, err)
			}
		}
	}
}

// TestSecurityComposeAndImageKeepSecretsOutAndPinDigests (L8): the image's build context leaves out
// secrets/, compose serves no unauthenticated /metrics on every
// interface, and the images compose pulls by tag are pinned by digest.
func TestSecurityComposeAndImageKeepSecretsOutAndPinDigests(t *testing.T) {
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(ignore), "\nsecrets/\n") {
		t.Error(".dockerignore does not leave out secrets/")
	}
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(compose), "\n") {
		code, _, _ := strings.Cut(line, "#")
		if strings.Contains(code, "BREAKERD_METRICS_LISTEN") && strings.Contains(code, "0.0.0.0") {
			t.Errorf("docker-compose.yml:%d serves /metrics on every interface: %s", i+1, strings.TrimSpace(line))
		}
		if img, ok := strings.CutPrefix(strings.TrimSpace(code), "image:"); ok {
			img = strings.TrimSpace(img)
			if !strings.HasSuffix(img, ":local") && !strings.Contains(img, "@sha256:") {
				t.Errorf("docker-compose.yml:%d pulls %s by tag alone", i+1, img)
			}
		}
	}
}
