// Package doccheck reads the project's Markdown the way a reader's browser
// does: it finds each page's links and the anchors GitHub gives its
// headings, so that tests can hold every relative link and anchor to a
// file and a heading that exist. docs/ is the one home of each fact and
// the README routes to it (CONTRIBUTING.md, "Layout"); a link that no
// longer resolves is a fact that lost its home.
package doccheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Link is one link target on a page, outside code.
type Link struct {
	Line   int    // 1-based line on the page
	Target string // as written: "policies.md#shadow-mode", "#keys", "https://..."
}

// Page is one Markdown file: its links and its headings' anchors.
type Page struct {
	Path    string          // slash-separated, relative to the root it was read from
	Links   []Link          // in order of appearance
	Anchors map[string]bool // GitHub's anchors for the page's headings
	Lines   []string        // the page, line by line
}

var (
	// inlineLink matches [text](target) and ![alt](target), target up to a
	// space (a title may follow) or the closing parenthesis.
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refDef matches a reference definition: [name]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// codeSpan matches inline code, whose text is never a link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// htmlAnchor matches <a id="x"> or <a name="x">, which also make anchors.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Parse reads one page's text.
func Parse(p, text string) Page {
	pg := Page{Path: p, Anchors: map[string]bool{}, Lines: strings.Split(text, "\n")}
	seen := map[string]int{}
	fence := ""
	for i, line := range pg.Lines {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			pg.Anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			slug := Slug(m[2])
			if n := seen[slug]; n > 0 {
				pg.Anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				pg.Anchors[slug] = true
			}
			seen[slug]++
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			pg.Links = append(pg.Links, Link{Line: i + 1, Target: strings.Trim(m[1], "<>")})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			pg.Links = append(pg.Links, Link{Line: i + 1, Target: strings.Trim(m[1], "<>")})
		}
	}
	return pg
}

// Slug is the anchor GitHub gives a heading's text: inline markup and
// links reduced to their text, lower-cased, every character but letters,
// digits, spaces, hyphens and underscores dropped, spaces made hyphens.
func Slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// IsExternal reports whether a target leaves the repository (a scheme, or
// a protocol-relative URL), which these checks do not follow.
func IsExternal(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	return scheme.MatchString(target)
}

// ReadTree reads every Markdown file under root, skipping hidden
// directories and installed dependencies (node_modules, virtual envs).
func ReadTree(root string) (map[string]Page, error) {
	pages := map[string]Page{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "dist" || name == "venv") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pages[rel] = Parse(rel, string(b))
		return nil
	})
	return pages, err
}

// Broken lists the relative links of the pages that do not resolve: a
// file that does not exist under root, or an anchor that no heading of
// the target page makes. Each entry reads "page:line: target: why".
func Broken(root string, pages map[string]Page) []string {
	var out []string
	for _, pg := range pages {
		for _, l := range pg.Links {
			if IsExternal(l.Target) {
				continue
			}
			if why := resolve(root, pages, pg, l.Target); why != "" {
				out = append(out, fmt.Sprintf("%s:%d: %s: %s", pg.Path, l.Line, l.Target, why))
			}
		}
	}
	return out
}

func resolve(root string, pages map[string]Page, from Page, target string) string {
	file, anchor, _ := strings.Cut(target, "#")
	file, _, _ = strings.Cut(file, "?")
	to := from
	if file != "" {
		p := path.Clean(path.Join(path.Dir(from.Path), file))
		if strings.HasPrefix(p, "../") {
			return "outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			return "no such file"
		}
		var ok bool
		if to, ok = pages[p]; !ok {
			if anchor != "" {
				return "an anchor into a file that is not Markdown"
			}
			return ""
		}
	}
	if anchor != "" && !to.Anchors[anchor] {
		return fmt.Sprintf("no heading in %s makes this anchor", to.Path)
	}
	return ""
}

// Fenced returns the code blocks of a page whose info string starts with
// lang, each with the line of its opening fence.
func Fenced(pg Page, lang string) (blocks []string, lines []int) {
	var cur []string
	in, want := false, false
	sc := bufio.NewScanner(strings.NewReader(strings.Join(pg.Lines, "\n")))
	n := 0
	for sc.Scan() {
		n++
		t := strings.TrimSpace(sc.Text())
		switch {
		case !in && strings.HasPrefix(t, "```"):
			in, want, cur = true, strings.HasPrefix(strings.TrimPrefix(t, "```"), lang), nil
			if want {
				lines = append(lines, n)
			}
		case in && strings.HasPrefix(t, "```"):
			in = false
			if want {
				blocks = append(blocks, strings.Join(cur, "\n"))
			}
		case in:
			cur = append(cur, sc.Text())
		}
	}
	return blocks, lines
}
