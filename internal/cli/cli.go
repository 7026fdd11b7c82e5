// Package cli gives breakerd's single-command binaries (breakerd,
// healthcheck, outage-replay) one command-line style, the one breakerctl
// gets from cobra: GNU flags parsed by pflag (--flag value, --flag=value),
// each flag bound to an environment variable that the flag overrides,
// help that lists every flag with its variable, --version from
// internal/buildinfo, and exit status 2 on a usage error.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/breakerd/breakerd/internal/buildinfo"
)

// ErrHelp is returned by Parse after it printed the help (--help, -h) or
// the version (--version) on stdout: the command is done and exits 0.
var ErrHelp = errors.New("help or version printed")

// UsageError is a wrong command line: an unknown or malformed flag, a bad
// value in a flag or its environment variable, or an unexpected argument.
// Commands exit 2 on it (Exit).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// Flag is one row of a command's flag table.
type Flag struct {
	// Name is the long flag without its dashes ("redis-url").
	Name string
	// Value points at the field the flag sets: *string, *bool, *int,
	// *int64, *float64 or *time.Duration. Its value when Parse is called is
	// the default shown in the help.
	Value any
	// Usage is one line of help.
	Usage string
	// Env is the flag's environment variable. Empty: derived from the
	// command's EnvPrefix (EnvName); "-": none.
	Env string
}

// Command is a single-command binary's line: its name, help and flags.
type Command struct {
	// Name is the program's name ("breakerd").
	Name string
	// Synopsis is the help's usage line after the name ("[flags]").
	Synopsis string
	// Help is printed after the usage line and before the flags.
	Help string
	// EnvPrefix names every flag's variable: EnvName(EnvPrefix, flag).
	// Empty: flags read no variable unless their Env says one.
	EnvPrefix string
	// Flags is the flag table, printed in this order.
	Flags []Flag
	// MaxArgs is how many positional arguments are accepted. Default 0.
	MaxArgs int
}

// EnvName is a flag's environment variable: prefix, an underscore, and the
// flag upper-cased with dashes as underscores (BREAKERD_REDIS_URL).
func EnvName(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// env is f's variable, or "" for none.
func (c Command) env(f Flag) string {
	switch {
	case f.Env == "-":
		return ""
	case f.Env != "":
		return f.Env
	case c.EnvPrefix != "":
		return EnvName(c.EnvPrefix, f.Name)
	}
	return ""
}

// Parse sets each flag's field from args (without the program name), or
// else from its environment variable read through getenv, or else leaves
// the default. It returns the positional arguments. --help and --version
// print to stdout and return ErrHelp; a bad command line or variable is a
// *UsageError naming the flag or variable; a Value of an unsupported type
// is a plain error (a bug in the table).
func (c Command) Parse(args []string, getenv func(string) string, stdout io.Writer) ([]string, error) {
	fs := pflag.NewFlagSet(c.Name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // Parse reports errors itself
	fs.SortFlags = false
	for _, f := range c.Flags {
		usage := f.Usage
		if e := c.env(f); e != "" {
			usage += " (env " + e + ")"
		}
		switch p := f.Value.(type) {
		case *string:
			fs.StringVar(p, f.Name, *p, usage)
		case *bool:
			fs.BoolVar(p, f.Name, *p, usage)
		case *int:
			fs.IntVar(p, f.Name, *p, usage)
		case *int64:
			fs.Int64Var(p, f.Name, *p, usage)
		case *float64:
			fs.Float64Var(p, f.Name, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, f.Name, *p, usage)
		default:
			return nil, fmt.Errorf("cli: flag --%s: unsupported field type %T", f.Name, f.Value)
		}
	}
	help := fs.BoolP("help", "h", false, "print this help and exit")
	version := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return nil, &UsageError{err}
	}
	switch {
	case *help:
		fmt.Fprintf(stdout, "Usage: %s %s\n\n%s\nFlags:\n%s", c.Name, c.Synopsis, c.Help, fs.FlagUsages())
		return nil, ErrHelp
	case *version:
		fmt.Fprintln(stdout, buildinfo.Get().String(c.Name))
		return nil, ErrHelp
	}
	var errs []error
	for _, f := range c.Flags {
		e := c.env(f)
		if e == "" || fs.Changed(f.Name) {
			continue
		}
		if v := getenv(e); v != "" {
			if err := fs.Lookup(f.Name).Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not %s", e, v, kind(f.Value)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &UsageError{err}
	}
	if fs.NArg() > c.MaxArgs {
		return nil, Usagef("unexpected argument %q", fs.Arg(c.MaxArgs))
	}
	return fs.Args(), nil
}

// kind names what a field's value must be, for error messages.
func kind(v any) string {
	switch v.(type) {
	case *bool:
		return "true or false"
	case *int, *int64:
		return "an integer"
	case *float64:
		return "a number"
	case *time.Duration:
		return "a duration (such as 500ms, 30s, 5m)"
	}
	return "valid"
}

// Exit reports run's error on stderr, prefixed with the program's name,
// and returns the exit status: 0 for nil and ErrHelp, 2 for a
// *UsageError (with a pointer to --help), 1 for anything else.
func Exit(program string, err error, stderr io.Writer) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", program, err, program)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", program, err)
	return 1
}
