package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, two levels up from this package.
const root = "../../.."

func readRepo(t *testing.T) map[string]Page {
	t.Helper()
	pages, err := ReadTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pages["README.md"]; !ok {
		t.Fatal("ReadTree found no README.md at the repository root")
	}
	return pages
}

// TestLinksResolve: every relative link and anchor in every Markdown file
// of the repository leads to a file and a heading that exist.
func TestLinksResolve(t *testing.T) {
	pages := readRepo(t)
	broken := Broken(root, pages)
	slices.Sort(broken)
	for _, b := range broken {
		t.Error(b)
	}
	links := 0
	for _, pg := range pages {
		links += len(pg.Links)
	}
	t.Logf("%d pages, %d links, %d broken", len(pages), links, len(broken))
}

// TestBrokenFindsWhatIsBroken holds the checker itself to a small tree
// with one link of each kind, good and bad.
func TestBrokenFindsWhatIsBroken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n## How it decides\n\n"+
		"[ok](docs/a.md#open-fraction-cap-groups) [ok](#how-it-decides) [ok](docs/) [ok](https://example.com/x)\n"+
		"[bad](docs/missing.md) [bad](docs/a.md#nowhere) [bad](#nope) `[code](not-a-link.md)`\n"+
		"```\n[fenced](not-a-link-either.md)\n```\n"+
		"[ref]: docs/gone.md\n")
	write("docs/a.md", "# A\n\n### Open-fraction cap (groups)\n\n## Twice\n\n## Twice\n\n[ok](../README.md) [ok](#twice-1) [bad](#twice-2) [bad](../../out.md)\n")
	pages, err := ReadTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := Broken(dir, pages)
	slices.Sort(got)
	want := []string{
		"README.md:10: docs/gone.md: no such file",
		"README.md:6: #nope: no heading in README.md makes this anchor",
		"README.md:6: docs/a.md#nowhere: no heading in docs/a.md makes this anchor",
		"README.md:6: docs/missing.md: no such file",
		"docs/a.md:9: #twice-2: no heading in docs/a.md makes this anchor",
		"docs/a.md:9: ../../out.md: outside the repository",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Broken() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Alerts: stuck_open, suspect_worker, credential_revoked": "alerts-stuck_open-suspect_worker-credential_revoked",
		"Open-fraction cap (groups)":                             "open-fraction-cap-groups",
		"Fast mode: Allow without a round trip":                  "fast-mode-allow-without-a-round-trip",
		"`breakerctl`":                                           "breakerctl",
		"Use it from [Go](docs/go-client.md)":                    "use-it-from-go",
		"What workers see, and certificates":                     "what-workers-see-and-certificates",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// history matches sentences that tell how the project was built rather
// than what it does: the docs state the code as it is, and the changelog
// and git keep the history.
var history = regexp.MustCompile(`(?i)\b(the issue (asked|named|measured|wanted|said)|issue \d+|issues? #\d+|this round|another engineer|the tryout|(seen|found) (by|in) the (tryout|three-copy)|before the changes below)\b`)

// TestNoDevelopmentHistory: no page tells how the project was developed.
func TestNoDevelopmentHistory(t *testing.T) {
	for _, pg := range readRepo(t) {
		for i, line := range pg.Lines {
			if m := history.FindString(line); m != "" {
				t.Errorf("%s:%d tells development history (%q): state what the code does, and leave the history to git", pg.Path, i+1, m)
			}
		}
	}
}

func TestHistoryPatternCatches(t *testing.T) {
	for _, s := range []string{"The target (issue 15): with", "(The issue asked for the upstream", "what this round adds", "another engineer's work"} {
		if !history.MatchString(s) {
			t.Errorf("history does not match %q", s)
		}
	}
	for _, s := range []string{"open an issue", "a GitHub issue thread", "the round trip"} {
		if history.MatchString(s) {
			t.Errorf("history matches %q, which tells no history", s)
		}
	}
}
