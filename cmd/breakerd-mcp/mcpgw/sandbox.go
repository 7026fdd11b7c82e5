package mcpgw

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SandboxArg, as the first argument of the gateway's own binary, makes it
// the sandbox launcher (ExecSandboxed) instead of a gateway.
const SandboxArg = "__breakerd-mcp-sandbox-exec"

// Sandbox modes: the values of SandboxOptions.Mode and --sandbox.
const (
	// SandboxAuto confines command upstreams where the kernel can, and
	// warns at start where it cannot.
	SandboxAuto = "auto"
	// SandboxRequired confines command upstreams, and refuses to start
	// where the kernel cannot.
	SandboxRequired = "required"
	// SandboxOff never confines them (warned at start).
	SandboxOff = "off"
)

// SandboxOptions confine command upstreams: each starts through a
// launcher that restricts itself with Landlock, then execs the command,
// so that the command and everything it starts cannot read, write or
// remove the gateway's files nor read any other process's /proc (see
// docs/mcp.md, "The upstream sandbox").
type SandboxOptions struct {
	// Mode is SandboxAuto (the default, also for ""), SandboxRequired or
	// SandboxOff.
	Mode string
	// Deny are the files a confined upstream may not read, write or
	// remove: the gateway's config and secret files. Relative names are
	// taken from the working directory.
	Deny []string
	// Launcher is the program that confines itself and then execs the
	// command: the gateway's own binary, whose main calls ExecSandboxed
	// when its first argument is SandboxArg. Default: os.Executable().
	Launcher string

	// probe, in tests, stands in for the kernel's answer: the Landlock
	// ABI version, or why there is none.
	probe func() (int, error)
}

// sandbox is how the gateway starts command upstreams, resolved once in
// New.
type sandbox struct {
	launcher string   // empty: no upstream is confined
	deny     []string // absolute
}

// checkSandboxMode names the flag at fault.
func checkSandboxMode(mode string) error {
	switch mode {
	case "", SandboxAuto, SandboxRequired, SandboxOff:
		return nil
	}
	return fmt.Errorf("must be %s, %s or %s, got %q", SandboxAuto, SandboxRequired, SandboxOff, mode)
}

// resolve decides, once at start, whether command upstreams are confined,
// and says so in the log: loudly (a warning) whenever one will run as
// the gateway's user outside the sandbox. Errors: an unknown mode, a
// required sandbox the kernel cannot give, no launcher.
func (o SandboxOptions) resolve(cfg Config, log *slog.Logger) (sandbox, error) {
	if err := checkSandboxMode(o.Mode); err != nil {
		return sandbox{}, fmt.Errorf("sandbox: %w", err)
	}
	commands, exposed, optedOut := cfg.commandUpstreams()
	if commands == 0 {
		return sandbox{}, nil
	}
	const risk = "a command upstream running as this user can read the gateway's token and config files " +
		"and /proc/<gateway pid>; see docs/mcp.md#the-upstream-sandbox"
	if o.Mode == SandboxOff {
		if len(exposed) > 0 {
			log.Warn("breakerd-mcp: SANDBOX OFF (--sandbox off): "+risk, "upstreams", strings.Join(exposed, ","))
		}
		return sandbox{}, nil
	}
	probe := o.probe
	if probe == nil {
		probe = LandlockABI
	}
	abi, err := probe()
	if err != nil {
		if o.Mode == SandboxRequired {
			return sandbox{}, fmt.Errorf("sandbox: required, but %w (--sandbox auto starts without it, warning)", err)
		}
		if len(exposed) > 0 {
			log.Warn("breakerd-mcp: SANDBOX UNAVAILABLE, command upstreams run unconfined: "+err.Error()+"; "+risk+
				" (--sandbox required refuses to start instead)", "upstreams", strings.Join(exposed, ","))
		}
		return sandbox{}, nil
	}
	if len(optedOut) > 0 {
		log.Warn("breakerd-mcp: upstreams outside the sandbox (sandbox: false): "+risk, "upstreams", strings.Join(optedOut, ","))
	}
	sb := sandbox{launcher: o.Launcher}
	if sb.launcher == "" {
		if sb.launcher, err = os.Executable(); err != nil {
			return sandbox{}, fmt.Errorf("sandbox: the launcher (this binary): %w", err)
		}
	}
	for _, d := range o.Deny {
		a, err := filepath.Abs(d)
		if err != nil {
			return sandbox{}, fmt.Errorf("sandbox: %s: %w", d, err)
		}
		sb.deny = append(sb.deny, a)
	}
	log.Info("breakerd-mcp: command upstreams start in the Landlock sandbox", "landlock_abi", abi,
		"denied", strings.Join(sb.deny, ","), "frozen_dirs", strings.Join(frozenDirs(sb.deny), ","))
	return sb, nil
}

// frozenDirs are the directories on the way to the denied files, where a
// confined upstream reaches only the entries that were there when it
// started (see grants).
func frozenDirs(deny []string) []string {
	var out []string
	for _, d := range deny {
		for dir := filepath.Dir(d); ; dir = filepath.Dir(dir) {
			if !slices.Contains(out, dir) {
				out = append(out, dir)
			}
			if dir == "/" || dir == "." {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// commandUpstreams counts the command upstreams, and names those that
// run as the gateway's user (exposed where there is no sandbox) and those
// of them that opted out of it.
func (c Config) commandUpstreams() (n int, exposed, optedOut []string) {
	for _, u := range c.Upstreams {
		if len(u.Command) == 0 {
			continue
		}
		n++
		if u.RunAs != nil {
			continue
		}
		exposed = append(exposed, u.Name)
		if !u.sandboxed() {
			optedOut = append(optedOut, u.Name)
		}
	}
	return n, exposed, optedOut
}

// command is the exec.Cmd that starts u: through the launcher when u is
// confined, as u.RunAs when set.
func (sb sandbox) command(u Upstream) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if sb.launcher != "" && u.sandboxed() {
		args := []string{SandboxArg}
		for _, d := range sb.deny {
			args = append(args, "--deny", d)
		}
		cmd = exec.Command(sb.launcher, append(append(args, "--"), u.Command...)...)
	} else {
		cmd = exec.Command(u.Command[0], u.Command[1:]...)
	}
	if u.RunAs != nil {
		if err := runAs(cmd, uint32(*u.RunAs.UID), uint32(*u.RunAs.GID)); err != nil {
			return nil, fmt.Errorf("upstream %s: run_as: %w", u.Name, err)
		}
	}
	return cmd, nil
}

// launch is the launcher's command line: the files to deny and the
// command to exec.
type launch struct {
	deny    []string
	command []string
}

// parseLaunch reads the launcher's arguments (after SandboxArg):
// "--deny FILE"... "--" COMMAND ARGS...
func parseLaunch(args []string) (launch, error) {
	var l launch
	for len(args) > 0 {
		switch {
		case args[0] == "--":
			l.command = args[1:]
			if len(l.command) == 0 || l.command[0] == "" {
				return launch{}, errors.New("sandbox launcher: no command after --")
			}
			return l, nil
		case args[0] == "--deny" && len(args) > 1 && filepath.IsAbs(args[1]):
			l.deny = append(l.deny, filepath.Clean(args[1]))
			args = args[2:]
		default:
			return launch{}, fmt.Errorf("sandbox launcher: unexpected argument %q (want --deny /abs/path ... -- command)", args[0])
		}
	}
	return launch{}, errors.New("sandbox launcher: no -- before the command")
}

// grants are the paths a confined upstream keeps every handled right on:
// what is left of the file tree once the denied files and /proc are
// taken out, as the siblings of each directory on the way to a denied
// file; plus, in /proc, the entries that name no process, and the
// upstream's own /proc/<pid> (self). A symlink is granted only when its
// target leads to no denied file. The directories on the way keep the
// rights the sandbox does not handle (listing, creating entries).
func grants(deny []string, self string) (dirs, files []string) {
	denied := []string{"/proc"}
	for _, d := range deny {
		denied = append(denied, d)
		if r, err := filepath.EvalSymlinks(d); err == nil {
			denied = append(denied, r)
		}
	}
	add := func(p string, fi os.FileInfo) {
		if fi.IsDir() {
			dirs = append(dirs, p)
		} else {
			files = append(files, p)
		}
	}
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return // nothing granted beneath what cannot be listed
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case p == "/proc":
				procGrants(add)
			case slices.Contains(denied, p):
			case slices.ContainsFunc(denied, func(d string) bool { return within(d, p) }):
				walk(p)
			default:
				target, err := filepath.EvalSymlinks(p)
				if err != nil || slices.ContainsFunc(denied, func(d string) bool { return within(d, target) || within(target, d) }) {
					continue // dangling, or a way back to a denied file
				}
				if fi, err := os.Stat(p); err == nil {
					add(p, fi)
				}
			}
		}
	}
	walk("/")
	if fi, err := os.Stat(self); err == nil {
		add(self, fi)
	}
	return dirs, files
}

// procGrants adds the entries of /proc that name no process: not a
// process's directory, nor self, thread-self, mounts, net... (symlinks
// that lead to one).
func procGrants(add func(string, os.FileInfo)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		p := filepath.Join("/proc", e.Name())
		if fi, err := os.Stat(p); err == nil {
			add(p, fi)
		}
	}
}

// within reports whether p is dir or beneath it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}
