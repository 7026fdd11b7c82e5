package store

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// binding matches a Lua line that binds names to values: `local A, B =
// x, y`, or a global's `A = x`.
var binding = regexp.MustCompile(`^(?:local\s+)?([A-Z_][A-Z0-9_]*(?:\s*,\s*[A-Z_][A-Z0-9_]*)*)\s*=\s*(.+)$`)

var argvRef = regexp.MustCompile(`\bARGV\[(\d+)\]`)

// luaArgv returns the names the Lua texts bind ARGV[1..n] to, in order,
// failing on a gap or an index bound twice.
func luaArgv(t *testing.T, texts ...string) []string {
	t.Helper()
	byIndex := map[int]string{}
	for _, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			m := binding.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			names := strings.Split(m[1], ",")
			values := strings.Split(m[2], ",") // no binding's value holds a comma of its own
			if len(names) != len(values) {
				continue
			}
			for i, v := range values {
				ref := argvRef.FindStringSubmatch(v)
				if ref == nil {
					continue
				}
				n, _ := strconv.Atoi(ref[1])
				if old, ok := byIndex[n]; ok {
					t.Fatalf("ARGV[%d] is bound to %s and %s", n, old, strings.TrimSpace(names[i]))
				}
				byIndex[n] = strings.TrimSpace(names[i])
			}
		}
	}
	out := make([]string, len(byIndex))
	for i := range out {
		name, ok := byIndex[i+1]
		if !ok {
			t.Fatalf("no Lua binding for ARGV[%d] (of %d)", i+1, len(byIndex))
		}
		out[i] = name
	}
	return out
}

// fields returns v's fields, embedded structs flattened, in order.
func fields(v reflect.Value) []reflect.Value {
	var out []reflect.Value
	for i := range v.NumField() {
		if v.Type().Field(i).Anonymous {
			out = append(out, fields(v.Field(i))...)
			continue
		}
		out = append(out, v.Field(i))
	}
	return out
}

// fieldTags returns the lua tags of t's fields, embedded structs
// flattened, in order.
func fieldTags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, fieldTags(f.Type)...)
			continue
		}
		out = append(out, f.Tag.Get("lua"))
	}
	return out
}

// distinct sets every field of the struct *p to a value of its own (the
// field's index, in the field's type) and returns the values in order.
func distinct(t *testing.T, p any) []any {
	t.Helper()
	var want []any
	for i, f := range fields(reflect.ValueOf(p).Elem()) {
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprint("v", i))
		case reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Interface:
			f.Set(reflect.ValueOf(fmt.Sprint("any", i)))
		default:
			t.Fatalf("field %d: no distinct value for kind %v", i, f.Kind())
		}
		want = append(want, f.Interface())
	}
	return want
}

// pointed returns args with each pointer replaced by the value it points
// to, as go-redis writes it (the fixed arguments are values already).
func pointed(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		v := reflect.ValueOf(a)
		if v.Kind() != reflect.Pointer {
			out[i] = a
			continue
		}
		out[i] = v.Elem().Interface()
	}
	return out
}

// TestArgvFollowsTheLua holds the Go side of each script's ARGV to the
// Lua's: the struct's fields, in order, carry the names the Lua binds
// ARGV[1..n] to (`local NAME = ARGV[n]`), and the method that appends
// them appends every field, once, in field order.
func TestArgvFollowsTheLua(t *testing.T) {
	t.Parallel()
	t.Run("common", func(t *testing.T) {
		if diff := cmp.Diff(luaArgv(t, libLua), fieldTags(reflect.TypeFor[commonArgv]())); diff != "" {
			t.Errorf("commonArgv's fields against lib.lua's ARGV (-lua +go):\n%s", diff)
		}
		var a commonArgv
		want := distinct(t, &a)
		if diff := cmp.Diff(want, pointed(a.appendTo(nil))); diff != "" {
			t.Errorf("commonArgv.appendTo against its fields (-fields +appended):\n%s", diff)
		}
		if len(want) != commonArgc {
			t.Errorf("commonArgc = %d, want %d", commonArgc, len(want))
		}
	})
	t.Run("record", func(t *testing.T) { checkScriptArgv[recordArgv](t, "record", recordLua, recordArgc) })
	t.Run("allow", func(t *testing.T) { checkScriptArgv[allowArgv](t, "allow", allowLua, allowArgc) })
}

// checkScriptArgv holds a script's ARGV struct A to lib.lua's and lua's
// names, in order, and its args to its fields: each appended once, in
// field order, into a slice made for exactly argc values.
func checkScriptArgv[A any, P interface {
	*A
	args() []any
}](t *testing.T, script, lua string, argc int) {
	t.Helper()
	name := reflect.TypeFor[A]().Name()
	if diff := cmp.Diff(luaArgv(t, libLua, lua), fieldTags(reflect.TypeFor[A]())); diff != "" {
		t.Errorf("%s's fields against lib.lua's and %s.lua's ARGV (-lua +go):\n%s", name, script, diff)
	}
	var a A
	want := distinct(t, P(&a))
	got := P(&a).args()
	if diff := cmp.Diff(want, pointed(got)); diff != "" {
		t.Errorf("%s.args against its fields (-fields +appended):\n%s", name, diff)
	}
	if len(want) != argc || cap(got) != argc {
		t.Errorf("%s: %d fields, args made room for %d values, %sArgc = %d; want all three equal", name, len(want), cap(got), script, argc)
	}
}
