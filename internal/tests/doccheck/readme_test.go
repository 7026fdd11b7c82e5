package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
)

// maxREADME is the README's length budget: it routes to docs/, which
// holds the facts.
const maxREADME = 300

// TestREADMERoutes: the README stays short, and its first screen links
// the ways to use breakerd: Go, HTTP, Python, TypeScript and MCP.
func TestREADMERoutes(t *testing.T) {
	pg := readRepo(t)["README.md"]
	if n := len(strings.Split(strings.TrimRight(strings.Join(pg.Lines, "\n"), "\n"), "\n")); n > maxREADME {
		t.Errorf("README.md has %d lines, want at most %d: move the facts into their page under docs/", n, maxREADME)
	}
	firstScreen := map[string]bool{}
	for _, l := range pg.Links {
		if l.Line <= 60 {
			firstScreen[l.Target] = true
		}
	}
	for _, want := range []string{"go", "http", "python", "typescript", "mcp"} {
		found := false
		for target := range firstScreen {
			if strings.HasPrefix(target, "#use-it-") && strings.Contains(target, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("README.md's first 60 lines link no #use-it-...%s... section", want)
		}
	}
}

// tiedMarker precedes a Go block that is an excerpt of an Example test:
// <!-- tied: FILE FUNC -->.
var tiedMarker = regexp.MustCompile(`^<!-- tied: (\S+) (\w+) -->$`)

// TestREADMEGoIsAnExample: every Go block of the README is marked as an
// excerpt of an Example function, its lines appear there in order, and
// the text block after it is that Example's checked output. The Example
// runs with the client's tests, so the README's Go runs in CI.
func TestREADMEGoIsAnExample(t *testing.T) {
	pg := readRepo(t)["README.md"]
	blocks, lines := Fenced(pg, "go")
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	for i, block := range blocks {
		m := tiedMarker.FindStringSubmatch(strings.TrimSpace(pg.Lines[lines[i]-2]))
		if m == nil {
			t.Errorf("README.md:%d: a Go block without a <!-- tied: FILE FUNC --> line above it", lines[i])
			continue
		}
		body, output := exampleBody(t, m[1], m[2])
		if missing := inOrder(strings.Split(block, "\n"), body); missing != "" {
			t.Errorf("README.md:%d: %q is not in %s, or not in this order", lines[i], missing, m[2])
		}
		after := lines[i] + len(strings.Split(block, "\n")) + 1 // past the closing fence
		texts, _ := Fenced(Page{Lines: pg.Lines[after:]}, "text")
		if len(texts) == 0 || strings.TrimSpace(texts[0]) != strings.Join(output, "\n") {
			t.Errorf("README.md: the text block after the Go block at line %d is not %s's output:\n%s", lines[i], m[2], strings.Join(output, "\n"))
		}
	}
}

// exampleBody returns the lines of func name in file (trimmed) and the
// lines of its // Output: comment.
func exampleBody(t *testing.T, file, name string) (body, output []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\nfunc "+name+"() {\n")
	if !ok {
		t.Fatalf("%s has no func %s", file, name)
	}
	rest, _, _ = strings.Cut(rest, "\n}\n")
	inOutput := false
	for _, l := range strings.Split(rest, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "// Output:":
			inOutput = true
		case inOutput:
			output = append(output, strings.TrimPrefix(strings.TrimPrefix(l, "//"), " "))
		default:
			body = append(body, l)
		}
	}
	return body, output
}

// inOrder returns the first non-blank line of want (trimmed) not found in
// have after the previous one, or "" when all are.
func inOrder(want, have []string) string {
	j := 0
	for _, w := range want {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		for j < len(have) && have[j] != w {
			j++
		}
		if j == len(have) {
			return w
		}
		j++
	}
	return ""
}

// TestREADMEPolicyLoads: the README's policy at a glance is a valid file.
func TestREADMEPolicyLoads(t *testing.T) {
	blocks, _ := Fenced(readRepo(t)["README.md"], "yaml")
	if len(blocks) == 0 {
		t.Fatal("README.md has no YAML block")
	}
	for _, b := range blocks {
		if _, err := policy.Parse([]byte(b)); err != nil {
			t.Errorf("README.md's policy does not load: %v\n%s", err, b)
		}
	}
}

// copyMarker precedes a block the README shows from another page, where
// that page's owner runs it: <!-- copy: PAGE LANG N --> names the Nth
// LANG block of PAGE.
var copyMarker = regexp.MustCompile(`^<!-- copy: (\S+) (\w+) (\d+) -->$`)

// TestREADMECopiesAreExact: a block the README, or a client package's
// README (the page a registry shows), copies from a page is the page's
// block, byte for byte, so it shows what runs there.
func TestREADMECopiesAreExact(t *testing.T) {
	pages := readRepo(t)
	for _, name := range []string{"README.md", "clients/python/README.md", "clients/typescript/README.md"} {
		readme, ok := pages[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if checkCopies(t, pages, name, readme) == 0 {
			t.Errorf("%s copies no block from the client pages", name)
		}
	}
}

// checkCopies checks each block readme (named name) copies, and returns
// how many it copies.
func checkCopies(t *testing.T, pages map[string]Page, name string, readme Page) (copies int) {
	t.Helper()
	for i, line := range readme.Lines {
		m := copyMarker.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		copies++
		shown, _ := Fenced(Page{Lines: readme.Lines[i+1:]}, m[2])
		src, ok := pages[m[1]]
		if !ok {
			t.Errorf("%s:%d copies from %s, which does not exist", name, i+1, m[1])
			continue
		}
		blocks, _ := Fenced(src, m[2])
		n, _ := strconv.Atoi(m[3])
		if n < 1 || n > len(blocks) {
			t.Errorf("%s:%d copies %s block %d of %s, which has %d", name, i+1, m[2], n, m[1], len(blocks))
			continue
		}
		if len(shown) == 0 || shown[0] != blocks[n-1] {
			t.Errorf("%s:%d: the block is not %s's %s block %d:\n%s", name, i+1, m[1], m[2], n, blocks[n-1])
		}
	}
	return copies
}

// quickStartHTTP finds the HTTP address the README's first command
// serves (its --http-listen).
var quickStartHTTP = regexp.MustCompile(`^go run \./cmd/breakerd\b.*--http-listen[ =](\S+)`)

// snippetURL is a daemon URL in a snippet.
var snippetURL = regexp.MustCompile(`https?://([\w.\-]+:\d+)`)

// TestREADMEQuickStartServesItsSnippets: the README's first command (the
// quick start) serves HTTP/JSON, and every URL its Python and TypeScript
// snippets call is that address: a snippet run after the quick start
// reaches the daemon, not a port nothing serves (where the clients'
// fallback would answer quietly).
func TestREADMEQuickStartServesItsSnippets(t *testing.T) {
	served, lang, calls := "", "", 0
	for i, l := range readRepo(t)["README.md"].Lines {
		switch {
		case strings.HasPrefix(l, "```"):
			lang = strings.TrimPrefix(l, "```")
		case served == "" && lang == "sh":
			if m := quickStartHTTP.FindStringSubmatch(l); m != nil {
				served = m[1]
			}
		case lang == "python" || lang == "ts" || lang == "typescript":
			for _, m := range snippetURL.FindAllStringSubmatch(l, -1) {
				calls++
				if m[1] != served {
					t.Errorf("README.md:%d: the %s snippet calls %s; the quick start serves HTTP/JSON at %q", i+1, lang, m[1], served)
				}
			}
		}
	}
	if served == "" || calls == 0 {
		t.Errorf("README.md: quick start serving %q, %d snippet URLs: want a `go run ./cmd/breakerd --http-listen ADDR` command and snippets calling ADDR", served, calls)
	}
}
