package cli_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/cli"
)

type conf struct {
	Addr   string
	Wait   time.Duration
	N      int64
	On     bool
	Hidden string
}

func command(c *conf) cli.Command {
	return cli.Command{
		Name: "prog", Synopsis: "[flags]", Help: "Does a thing.\n", EnvPrefix: "PROG",
		Flags: []cli.Flag{
			{Name: "addr", Value: &c.Addr, Usage: "where"},
			{Name: "wait", Value: &c.Wait, Usage: "how long"},
			{Name: "n", Value: &c.N, Usage: "how many"},
			{Name: "on", Value: &c.On, Usage: "whether"},
			{Name: "hidden", Value: &c.Hidden, Usage: "no variable", Env: "-"},
		},
	}
}

func TestFlagWinsOverEnvWinsOverDefault(t *testing.T) {
	c := conf{Addr: "default", Wait: time.Second, N: 1}
	env := map[string]string{"PROG_ADDR": "from-env", "PROG_WAIT": "5s", "PROG_ON": "true", "PROG_HIDDEN": "ignored"}
	rest, err := command(&c).Parse([]string{"--wait=2s", "--hidden", "x"}, func(k string) string { return env[k] }, &strings.Builder{})
	if err != nil || len(rest) != 0 {
		t.Fatalf("Parse = %v, %v", rest, err)
	}
	if want := (conf{Addr: "from-env", Wait: 2 * time.Second, N: 1, On: true, Hidden: "x"}); c != want {
		t.Errorf("config = %+v, want %+v", c, want)
	}
}

func TestUsageErrorsNameTheFlagOrVariable(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--nope"}, nil, "unknown flag: --nope"},
		{[]string{"--wait", "soon"}, nil, "--wait"},
		{[]string{"-x"}, nil, "unknown shorthand flag: 'x'"},
		{nil, map[string]string{"PROG_N": "many"}, `PROG_N: "many" is not an integer`},
		{[]string{"stray"}, nil, `unexpected argument "stray"`},
	} {
		var c conf
		_, err := command(&c).Parse(tc.args, func(k string) string { return tc.env[k] }, &strings.Builder{})
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %v) = %v, want a *UsageError containing %q", tc.args, tc.env, err, tc.want)
		}
		var stderr strings.Builder
		if code := cli.Exit("prog", err, &stderr); code != 2 || !strings.Contains(stderr.String(), "prog --help") {
			t.Errorf("Exit(%v) = %d, %q; want 2 and a pointer to --help", err, code, stderr.String())
		}
	}
}

func TestHelpListsEveryFlagWithItsVariable(t *testing.T) {
	var c conf
	var out strings.Builder
	_, err := command(&c).Parse([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, cli.ErrHelp) || cli.Exit("prog", err, &strings.Builder{}) != 0 {
		t.Fatalf("Parse(-h) = %v, want ErrHelp, exit 0", err)
	}
	for _, want := range []string{"Usage: prog [flags]", "Does a thing.", "--addr string     where (env PROG_ADDR)", "--wait duration", "(env PROG_WAIT)", "--hidden string", "--version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "PROG_HIDDEN") {
		t.Errorf("help names a variable for a flag that has none:\n%s", out.String())
	}
	out.Reset()
	if _, err := command(&c).Parse([]string{"--version"}, func(string) string { return "" }, &out); !errors.Is(err, cli.ErrHelp) || !strings.HasPrefix(out.String(), "prog ") || !strings.Contains(out.String(), "commit ") {
		t.Errorf("--version = %v, %q; want ErrHelp and a version line", err, out.String())
	}
}

func TestExit(t *testing.T) {
	var stderr strings.Builder
	if got := cli.Exit("prog", nil, &stderr); got != 0 || stderr.Len() != 0 {
		t.Errorf("Exit(nil) = %d, %q", got, stderr.String())
	}
	if got := cli.Exit("prog", errors.New("redis down"), &stderr); got != 1 || stderr.String() != "prog: redis down\n" {
		t.Errorf("Exit(failure) = %d, %q; want 1, one line", got, stderr.String())
	}
}
