package mcpgw

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/yamlfile"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// WorkerSession is the worker_id value that gives each downstream MCP
// session a client of its own (see Config.WorkerID).
const WorkerSession = "session"

// DefaultBreakerPrefix starts every breaker name the default rule makes:
// mcp:<upstream>:<tool>.
const DefaultBreakerPrefix = "mcp:"

// DefaultTimeout bounds one upstream tool call when an upstream sets no
// timeout.
const DefaultTimeout = 30 * time.Second

// DefaultMaxTools bounds the tools the gateway serves from one upstream
// when it sets no max_tools: each session holds the list, so an upstream
// listing without end must not grow every session with it.
const DefaultMaxTools = 2000

// BaseEnv are the variables a command upstream gets from the gateway's
// own environment without asking: what a program needs to run and find
// its files, and nothing that names a credential. Everything else comes
// from its env_passthrough list or its env map (see docs/mcp.md).
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

// DefaultConnectTimeout bounds starting or connecting to an upstream (the
// MCP handshake included) when an upstream sets no connect_timeout.
const DefaultConnectTimeout = 30 * time.Second

// Config is the gateway's YAML file. Tests build it directly.
//
//	worker_id: session          # optional; see WorkerID
//	breaker_prefix: "mcp:"      # optional
//	upstreams:
//	  - name: search
//	    command: ["search-mcp", "--stdio"]
//	    env: {SEARCH_REGION: eu}
//	    env_passthrough: [SEARCH_API_KEY]
//	    timeout: 20s
//	    connect_timeout: 10s
//	    breakers: {web_search: vendor-x}   # per-tool override
//	    run_as: {uid: 1001, gid: 1001}     # optional: another user
//	    sandbox: true                      # the default
//	  - name: tickets
//	    url: http://127.0.0.1:9000/mcp
//	    is_error: invalid_argument
type Config struct {
	// WorkerID is empty (the sessions share the gateway's client) or
	// "session" (each downstream MCP session has a client of its own,
	// whose local fallback judges its calls apart, and is named
	// "<gateway id>/<random>" in the log). Either way breakerd hears the
	// gateway as one worker, the --worker-id flag: see docs/mcp.md
	// ("Worker ids").
	WorkerID string `yaml:"worker_id"`
	// BreakerPrefix starts the default breaker names. Default "mcp:", so
	// tool web_search of upstream search goes through breaker
	// mcp:search:web_search.
	BreakerPrefix string `yaml:"breaker_prefix"`
	// Upstreams are the MCP servers the gateway fronts; at least one.
	Upstreams []Upstream `yaml:"upstreams"`
}

// Upstream is one MCP server behind the gateway: exactly one of Command
// (stdio) or URL (Streamable HTTP), or, in tests, Transport.
type Upstream struct {
	// Name names the upstream in breaker names, logs and errors: non-empty,
	// printable, no colon.
	Name string `yaml:"name"`
	// Command is the program and its arguments, started with a minimal
	// environment (BaseEnv, then EnvPassthrough, then Env) and spoken to
	// over its stdin and stdout. It is started again on the next call after
	// it exits.
	Command []string `yaml:"command"`
	// Env adds variables to Command's environment.
	Env map[string]string `yaml:"env"`
	// EnvPassthrough names variables of the gateway's environment that
	// Command also gets (an API key the upstream needs). Names only; the
	// gateway's own BREAKERD_MCP_* settings are refused.
	EnvPassthrough []string `yaml:"env_passthrough"`
	// MaxTools bounds the tools served from this upstream; the listing is
	// read no further, and breakerd_status says that tools were left out.
	// Default DefaultMaxTools.
	MaxTools int `yaml:"max_tools"`
	// URL is a Streamable HTTP endpoint (http or https).
	URL string `yaml:"url"`
	// Timeout bounds one tool call, from the request to the answer.
	// Default 30s.
	Timeout yamlfile.Duration `yaml:"timeout"`
	// ConnectTimeout bounds starting or connecting to the upstream, the
	// MCP handshake included, when a call (or the gateway's start) finds
	// it disconnected; a call's Timeout starts after it. Default 30s.
	ConnectTimeout yamlfile.Duration `yaml:"connect_timeout"`
	// IsError is the outcome recorded for a result with isError true, in
	// lower case without the OUTCOME_ prefix. Default "server_error" (a
	// counted failure); "invalid_argument" when the upstream's isError
	// mostly means a bad request from the model.
	IsError string `yaml:"is_error"`
	// Breakers overrides the breaker of some tools: tool name -> breaker
	// name. Tools that share a dependency and credential can share one.
	Breakers map[string]string `yaml:"breakers"`

	// Sandbox, for a command, is false to start it outside the gateway's
	// sandbox (docs/mcp.md, "The upstream sandbox"), as the gateway's
	// own user with the gateway's files in reach; warned at start.
	// Default true.
	Sandbox *bool `yaml:"sandbox"`
	// RunAs, for a command, starts it as another user, {uid: 1001, gid:
	// 1001}, without supplementary groups (and in the sandbox too, unless
	// Sandbox is false). The gateway needs the privilege to switch (root,
	// or CAP_SETUID and CAP_SETGID); Linux only.
	RunAs *RunAs `yaml:"run_as"`

	// Transport, when set, replaces Command and URL: it returns a new
	// transport for each connection (tests use in-memory transports).
	Transport func() mcp.Transport `yaml:"-"`
}

// RunAs is the user and group a command upstream runs as; both are
// required.
type RunAs struct {
	UID *int64 `yaml:"uid"`
	GID *int64 `yaml:"gid"`
}

// check names the field at fault: "uid: ...".
func (r RunAs) check() error {
	for _, f := range []struct {
		name string
		v    *int64
	}{{"uid", r.UID}, {"gid", r.GID}} {
		switch {
		case f.v == nil:
			return fmt.Errorf("%s: is required", f.name)
		case *f.v < 0 || *f.v >= math.MaxUint32:
			return fmt.Errorf("%s: must be 0 to %d, got %d", f.name, uint32(math.MaxUint32-1), *f.v)
		}
	}
	return nil
}

// sandboxed reports whether a command upstream starts in the sandbox.
func (u Upstream) sandboxed() bool { return u.Sandbox == nil || *u.Sandbox }

// LoadConfig reads and checks the YAML file at path.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("mcpgw: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("mcpgw: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes YAML (unknown fields are errors) and checks it with
// Check.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if err := yamlfile.Decode(b, &c); err != nil {
		return Config{}, err
	}
	return c, c.Check()
}

// Check validates c. Errors name the field: "upstreams[1].url: ...".
func (c Config) Check() error {
	if c.WorkerID != "" && c.WorkerID != WorkerSession {
		return fmt.Errorf("worker_id: must be empty or %q, got %q (set a gateway's id with --worker-id)", WorkerSession, c.WorkerID)
	}
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one is required")
	}
	seen := map[string]bool{}
	for i, u := range c.Upstreams {
		f := fmt.Sprintf("upstreams[%d]", i)
		switch {
		case u.Name == "":
			return fmt.Errorf("%s.name: is required", f)
		case strings.Contains(u.Name, ":") || !limits.Printable(u.Name) || strings.TrimSpace(u.Name) != u.Name:
			return fmt.Errorf("%s.name: must be printable with no colon or outer space, got %q", f, u.Name)
		case seen[u.Name]:
			return fmt.Errorf("%s.name: %q is used twice", f, u.Name)
		}
		seen[u.Name] = true
		n := 0
		if len(u.Command) > 0 {
			n++
		}
		if u.URL != "" {
			n++
		}
		if u.Transport != nil {
			n++
		}
		if n != 1 {
			return fmt.Errorf("%s: set exactly one of command or url", f)
		}
		if u.URL != "" {
			p, err := url.Parse(u.URL)
			if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				return fmt.Errorf("%s.url: must be an http or https URL, got %q", f, u.URL)
			}
		}
		if len(u.Command) > 0 && u.Command[0] == "" {
			return fmt.Errorf("%s.command: the program is empty", f)
		}
		if err := u.checkCommand(); err != nil {
			return fmt.Errorf("%s%w", f, err)
		}
		if u.MaxTools < 0 {
			return fmt.Errorf("%s.max_tools: must not be negative", f)
		}
		if u.Timeout < 0 {
			return fmt.Errorf("%s.timeout: must not be negative", f)
		}
		if u.ConnectTimeout < 0 {
			return fmt.Errorf("%s.connect_timeout: must not be negative", f)
		}
		if _, err := u.isErrorOutcome(); err != nil {
			return fmt.Errorf("%s.is_error: %w", f, err)
		}
		for tool, br := range u.Breakers {
			if err := validBreaker(br); err != nil {
				return fmt.Errorf("%s.breakers.%s: %w", f, tool, err)
			}
		}
	}
	return nil
}

// checkCommand checks what only a command upstream may set; its errors
// start with the field (".env: ...").
func (u Upstream) checkCommand() error {
	if len(u.Env) > 0 && len(u.Command) == 0 {
		return errors.New(".env: only for a command upstream")
	}
	if (u.Sandbox != nil || u.RunAs != nil) && len(u.Command) == 0 {
		return errors.New(": sandbox and run_as are only for a command upstream")
	}
	if u.RunAs != nil {
		if err := u.RunAs.check(); err != nil {
			return fmt.Errorf(".run_as.%w", err)
		}
	}
	if err := u.checkPassthrough(); err != nil {
		return fmt.Errorf(".env_passthrough%w", err)
	}
	return nil
}

// checkPassthrough checks EnvPassthrough; its errors start with the
// element ("[2]: ...").
func (u Upstream) checkPassthrough() error {
	if len(u.EnvPassthrough) > 0 && len(u.Command) == 0 {
		return errors.New(": only for a command upstream")
	}
	for i, name := range u.EnvPassthrough {
		switch {
		case name == "" || strings.ContainsAny(name, "= \x00") || !limits.Printable(name):
			return fmt.Errorf("[%d]: %q is not a variable name", i, name)
		case strings.HasPrefix(name, envPrefix):
			return fmt.Errorf("[%d]: %s is the gateway's own setting, never passed to an upstream", i, name)
		}
	}
	return nil
}

// environ is a command upstream's environment: BaseEnv and EnvPassthrough
// as getenv has them (unset ones left out), then Env.
func (u Upstream) environ(getenv func(string) (string, bool)) []string {
	var env []string
	for _, name := range append(slices.Clone(BaseEnv), u.EnvPassthrough...) {
		if v, ok := getenv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range u.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// maxTools is the upstream's bound on served tools.
func (u Upstream) maxTools() int {
	if u.MaxTools > 0 {
		return u.MaxTools
	}
	return DefaultMaxTools
}

// timeout is the upstream's call timeout.
func (u Upstream) timeout() time.Duration {
	if u.Timeout > 0 {
		return time.Duration(u.Timeout)
	}
	return DefaultTimeout
}

// connectTimeout is the upstream's connect timeout.
func (u Upstream) connectTimeout() time.Duration {
	if u.ConnectTimeout > 0 {
		return time.Duration(u.ConnectTimeout)
	}
	return DefaultConnectTimeout
}

// isErrorOutcome reads IsError.
func (u Upstream) isErrorOutcome() (pb.Outcome, error) {
	if u.IsError == "" {
		return pb.Outcome_OUTCOME_SERVER_ERROR, nil
	}
	v, ok := pb.Outcome_value["OUTCOME_"+strings.ToUpper(u.IsError)]
	if !ok || v == int32(pb.Outcome_OUTCOME_UNSPECIFIED) {
		return 0, fmt.Errorf("%q is not an outcome (server_error, invalid_argument, timeout...)", u.IsError)
	}
	return pb.Outcome(v), nil
}

// breakerFor is the breaker of the upstream's tool: the override, or
// <prefix><upstream>:<tool>.
func (c Config) breakerFor(u Upstream, tool string) string {
	if b, ok := u.Breakers[tool]; ok {
		return b
	}
	prefix := c.BreakerPrefix
	if prefix == "" {
		prefix = DefaultBreakerPrefix
	}
	return prefix + u.Name + ":" + tool
}

// validBreaker applies breakerd's own rule for a breaker name
// (limits.Name, as the daemon and pkg/client do). Checking it here keeps
// one refused name from failing the BatchGet of a whole toolset.
func validBreaker(v string) error { return limits.Name("breaker", v) }
