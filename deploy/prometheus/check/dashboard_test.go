package check

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

const dashboardFile = "../../grafana/breakerd.json"

// dashboard is the part of Grafana's dashboard JSON this check reads.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// variable matches a Grafana variable in a query: $name or ${name}.
var variable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// globals are the Grafana variables every query may use, as a range
// PromQL accepts.
var globals = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}

// expand replaces the variables in expr with values PromQL parses: the
// globals' ranges, and each dashboard variable's default (vars).
func expand(expr string, vars map[string]string) (string, []string) {
	var unknown []string
	out := variable.ReplaceAllStringFunc(expr, func(v string) string {
		name := variable.FindStringSubmatch(v)[1]
		if val, ok := globals[name]; ok {
			return val
		}
		if val, ok := vars[name]; ok {
			return val
		}
		unknown = append(unknown, v)
		return v
	})
	return out, unknown
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	return d
}

// The dashboard is valid Grafana JSON: titled, one datasource variable
// that every panel uses, unique panel ids, panels inside the 24-column
// grid that do not overlap; and every query parses and names only
// metrics the daemon registers.
func TestDashboardQueriesNameRegisteredMetrics(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and schema 36 or later", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		switch {
		case v.Type == "datasource" && v.Query == "prometheus":
			vars[v.Name] = "prometheus"
		case v.Type == "custom" || v.Type == "constant" || v.Type == "textbox":
			vars[v.Name] = strings.Split(v.Query, ",")[0]
		default:
			t.Errorf("variable %s: type %s is not checked here", v.Name, v.Type)
		}
	}
	if vars["datasource"] != "prometheus" {
		t.Fatal(`no "datasource" variable of type datasource querying prometheus`)
	}
	names := registered(t)
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	queries := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := cells[[2]int{x, y}]; ok {
						t.Errorf("panel %q overlaps %q at (%d,%d)", p.Title, other, x, y)
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			refs := map[string]bool{}
			for _, q := range p.Targets {
				if q.RefID == "" || refs[q.RefID] {
					t.Errorf("panel %q: refId %q missing or repeated", p.Title, q.RefID)
				}
				refs[q.RefID] = true
				expr, unknownVars := expand(q.Expr, vars)
				if len(unknownVars) > 0 {
					t.Errorf("panel %q: %s uses undefined variables %v", p.Title, q.RefID, unknownVars)
				}
				if bad := unknown(t, names, expr); len(bad) > 0 {
					t.Errorf("panel %q: %s names metrics breakerd does not register: %v", p.Title, q.RefID, bad)
				}
				queries++
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("the dashboard has no query: nothing was checked")
	}
}

// The dashboard check fails on what it is for: an unknown metric and an
// undefined variable.
func TestDashboardCheckCanFail(t *testing.T) {
	names := registered(t)
	expr, undefined := expand(`sum(rate(breakerd_nope_total{job="$job", x="$nope"}[$__rate_interval]))`, map[string]string{"job": "breakerd"})
	if len(undefined) != 1 || undefined[0] != "$nope" {
		t.Errorf("undefined variables = %v, want [$nope]", undefined)
	}
	if bad := unknown(t, names, expr); len(bad) != 1 {
		t.Errorf("unknown metrics = %v, want breakerd_nope_total", bad)
	}
}
