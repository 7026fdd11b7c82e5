// Package mcpgw is breakerd's Model Context Protocol gateway: an MCP server
// that fronts upstream MCP servers and asks breakerd before every tool
// call, so that any MCP agent loses a broken tool from its toolset, is told
// why, and is not offered it again inside the same session.
//
// Each downstream session has its own mcp.Server (its own tool list, so a
// removal notifies that session alone) and its own client.Run (a removed
// tool stays removed for the session). Upstream connections, the catalog
// of tools and the breakerd connection are shared.
package mcpgw

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// StatusTool is the name of the gateway's own tool, always listed.
const StatusTool = "breakerd_status"

// Options configure a Gateway.
type Options struct {
	// Config is the upstreams and the mapping rule.
	Config Config
	// Conn is the connection to breakerd (a *grpc.ClientConn). The gateway
	// builds its pkg/client Clients on it and leaves it open.
	Conn grpc.ClientConnInterface
	// WorkerID is this gateway instance's worker id (the --worker-id
	// flag). Required; with Config.WorkerID "session" it prefixes each
	// session's id.
	WorkerID string
	// ClientOptions are added to every pkg/client Client the gateway
	// builds (Allow budget, fallback mode, clock).
	ClientOptions []client.Option
	// Log receives the gateway's own log lines. Default: discard.
	Log *slog.Logger
	// UpstreamStderr receives command upstreams' stderr. Default: discard.
	UpstreamStderr io.Writer
	// WatchRetry is how long to wait before resubscribing to breakerd's
	// Watch stream after it breaks. Default 1s.
	WatchRetry time.Duration
	// Version is reported to clients as the server's version.
	Version string
	// Sandbox confines command upstreams (docs/mcp.md, "The upstream
	// sandbox"); its zero value confines them where the kernel can.
	Sandbox SandboxOptions
	// Registerer receives the gateway's Prometheus metrics (docs/mcp.md,
	// Metrics). Nil: they are kept but not exported.
	Registerer prometheus.Registerer
}

// tool is one upstream tool as the gateway serves it.
type tool struct {
	up      *upstream
	mcp     *mcp.Tool // as the upstream listed it
	breaker string
}

// refusal is an upstream tool the gateway does not serve, and why. A
// model reads it (breakerd_status), so Tool is the upstream's name only
// when it keeps to MCP's tool-name syntax (see shownName).
type refusal struct {
	Tool     string `json:"tool,omitempty"`
	Upstream string `json:"upstream"`
	Reason   string `json:"reason"`
}

// Gateway serves downstream MCP sessions. Build it with New, run its
// Watch loop with Run, and serve sessions with Connect or Handler
// (Serve does all three for the command). It is safe for concurrent use.
type Gateway struct {
	o       Options
	log     *slog.Logger
	m       *gatewayMetrics
	shared  *client.Client // the instance's worker; also the health witness
	ups     []*upstream
	catalog map[string]*tool // by downstream tool name
	order   []string         // catalog names, sorted
	refused []refusal

	mu         sync.Mutex
	sessions   map[*session]struct{}
	starting   int            // HTTP sessions reserved and not yet joined (see reserve)
	startingBy map[string]int // starting, by client (clientKey)
	watchUp    bool           // the Watch stream is subscribed
	downAt     time.Time      // when the stream broke; zero while up or before the first try
}

// New connects to every upstream and lists its tools (each within its
// timeout), and maps each tool to its breaker. A tool whose breaker name
// breakerd would refuse, whose name another upstream already serves, or
// whose input schema is not a JSON object is left out, logged, and shown
// by breakerd_status. Errors: an invalid Config, a missing WorkerID or
// Conn, an upstream that cannot be listed.
func New(ctx context.Context, o Options) (*Gateway, error) {
	if err := o.Config.Check(); err != nil {
		return nil, fmt.Errorf("mcpgw: config: %w", err)
	}
	if o.WorkerID == "" {
		return nil, errors.New("mcpgw: a worker id is required")
	}
	if o.Conn == nil {
		return nil, errors.New("mcpgw: a breakerd connection is required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.UpstreamStderr == nil {
		o.UpstreamStderr = io.Discard
	}
	if o.WatchRetry <= 0 {
		o.WatchRetry = time.Second
	}
	sb, err := o.Sandbox.resolve(o.Config, o.Log)
	if err != nil {
		return nil, fmt.Errorf("mcpgw: %w", err)
	}
	g := &Gateway{o: o, log: o.Log, catalog: map[string]*tool{}, sessions: map[*session]struct{}{}, startingBy: map[string]int{}}
	g.shared = g.newClient(o.WorkerID)
	impl := &mcp.Implementation{Name: "breakerd-mcp", Version: o.Version}
	for _, uc := range o.Config.Upstreams {
		out, _ := uc.isErrorOutcome() // checked by Check
		u := &upstream{cfg: uc, isError: out, impl: impl, stderr: o.UpstreamStderr, sandbox: sb}
		g.ups = append(g.ups, u)
		tools, more, err := u.tools(ctx)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("mcpgw: %w", err)
		}
		for _, t := range tools {
			g.add(u, t)
		}
		if more {
			why := fmt.Sprintf("the upstream lists more than its max_tools (%d); the rest are not served", uc.maxTools())
			g.refused = append(g.refused, refusal{Upstream: uc.Name, Reason: why})
			g.log.Error("mcpgw: upstream tools not served", "upstream", uc.Name, "reason", why)
		}
	}
	g.order = slices.Sorted(maps.Keys(g.catalog))
	m, err := newMetrics(g, o.Registerer)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("mcpgw: metrics: %w", err)
	}
	g.m = m
	return g, nil
}

func (g *Gateway) add(u *upstream, t *mcp.Tool) {
	refuse := func(why string) {
		g.refused = append(g.refused, refusal{Tool: shownName(t.Name), Upstream: u.cfg.Name, Reason: why})
		g.log.Error("mcpgw: upstream tool not served", "upstream", u.cfg.Name, "tool", t.Name, "reason", why)
	}
	if err := toolName(t.Name); err != nil {
		refuse(err.Error())
		return
	}
	br := g.o.Config.breakerFor(u.cfg, t.Name)
	if err := validBreaker(br); err != nil {
		refuse("breakerd refuses its breaker name: " + err.Error() +
			" (map the tool to a valid name under breakers: in the gateway's file)")
		return
	}
	if t.Name == StatusTool {
		refuse("the name " + StatusTool + " is the gateway's own tool")
		return
	}
	if prev, dup := g.catalog[t.Name]; dup {
		refuse("upstream " + prev.up.cfg.Name + " already serves a tool of this name")
		return
	}
	if err := objectSchema(t.InputSchema); err != nil {
		refuse(err.Error())
		return
	}
	g.catalog[t.Name] = &tool{up: u, mcp: t, breaker: br}
}

// maxToolName is MCP's bound on a tool name, in bytes.
const maxToolName = 128

// toolName applies MCP's tool-name syntax: 1 to 128 of A-Z, a-z, 0-9,
// "_", "-" and ".". A name outside it may carry words for the model
// (newlines, bidirectional controls, "SYSTEM: ..."), so it is refused and
// never shown as it is (see shownName).
func toolName(name string) error {
	if name == "" || len(name) > maxToolName {
		return fmt.Errorf("its name is not 1 to %d characters (MCP's tool-name syntax)", maxToolName)
	}
	for _, r := range name {
		if !validToolRune(r) {
			return errors.New("its name has characters outside MCP's tool-name syntax (A-Z a-z 0-9 _ - .)")
		}
	}
	return nil
}

func validToolRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

// shownName is how a refused tool is named where a model may read it:
// the name itself when it keeps to the syntax, else its length and a
// digest (the gateway's log has the name, quoted, for the operator).
func shownName(name string) string {
	if toolName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("invalid-name-%d-bytes-%x", len(name), sum[:4])
}

// objectSchema checks what mcp.Server.AddTool requires of an input schema
// (it panics otherwise): a JSON object whose type is "object".
func objectSchema(s any) error {
	b, err := json.Marshal(s)
	if err != nil || s == nil {
		return errors.New("its input schema is missing or not JSON")
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["type"] != "object" {
		return errors.New(`its input schema is not a JSON object schema of type "object"`)
	}
	return nil
}

// newClient builds a pkg/client Client reporting as worker on the shared
// connection.
func (g *Gateway) newClient(worker string) *client.Client {
	opts := append([]client.Option{client.WithWorkerID(worker), client.WithClassifier(classify)}, g.o.ClientOptions...)
	return client.New(g.o.Conn, opts...)
}

// Close closes the upstream connections and the gateway's clients; the
// breakerd connection stays open. Sessions still connected get transport
// errors on their next upstream call.
func (g *Gateway) Close() {
	for _, u := range g.ups {
		u.close()
	}
	_ = g.shared.Close()
}

// Tools returns the names of the tools the gateway serves (before any
// breaker filtering), sorted.
func (g *Gateway) Tools() []string { return slices.Clone(g.order) }

// Run follows breakerd's Watch stream until ctx ends: each event makes the
// sessions that still list a tool of that breaker ask breakerd again, and
// those that lose it get notifications/tools/list_changed. While the
// stream is broken (breakerd down), it logs that once, answers health
// checks with the outage, and resubscribes every WatchRetry; on its
// return every session is checked again (events may have been missed).
func (g *Gateway) Run(ctx context.Context) error {
	for {
		err := watchBreakers(ctx, g.shared.API(), g.watchLive, g.onEvent)
		if ctx.Err() != nil {
			return nil
		}
		g.watchDown(err)
		t := time.NewTimer(g.o.WatchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// watchBreakers is the one place that reads breakerd's Watch stream: it
// subscribes to every breaker, calls live once the subscription holds,
// then event with each event's breaker name, until the stream breaks.
func watchBreakers(ctx context.Context, api pb.BreakerServiceClient, live func(), event func(breaker string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		return err
	}
	if _, err := stream.Header(); err != nil {
		return err
	}
	live()
	for {
		e, err := stream.Recv()
		if err != nil {
			return err
		}
		if e.GetEvent() == nil {
			continue // a heartbeat
		}
		event(e.GetEvent().GetBreaker())
	}
}

func (g *Gateway) watchLive() {
	g.mu.Lock()
	wasDown := !g.downAt.IsZero()
	g.watchUp, g.downAt = true, time.Time{}
	g.mu.Unlock()
	if wasDown {
		g.log.Info("mcpgw: breakerd answers again; sessions are checked against it")
		g.recheck(func(*session) bool { return true })
	}
}

func (g *Gateway) watchDown(err error) {
	g.mu.Lock()
	first := g.downAt.IsZero()
	if first {
		g.downAt = time.Now()
	}
	g.watchUp = false
	g.mu.Unlock()
	if first {
		g.log.Warn("mcpgw: breakerd unreachable; tool calls are judged by pkg/client's fallback until it answers", "err", err)
	}
}

func (g *Gateway) onEvent(breaker string) {
	g.recheck(func(s *session) bool { return s.wants(breaker) })
}

// recheck refreshes, each in its own goroutine, the sessions that match.
func (g *Gateway) recheck(match func(*session) bool) {
	g.mu.Lock()
	var todo []*session
	for s := range g.sessions {
		if match(s) {
			todo = append(todo, s)
		}
	}
	g.mu.Unlock()
	for _, s := range todo {
		go func() {
			if err := s.refresh(s.ctx); err != nil && s.ctx.Err() == nil {
				g.log.Warn("mcpgw: session refresh", "session", s.label, "err", err)
			}
		}()
	}
}

// Health is the gateway's state as its health endpoint reports it.
type Health struct {
	// Status is "ok", or "degraded" while breakerd is unreachable (tool
	// calls are judged by pkg/client's fallback).
	Status string `json:"status"`
	// Breakerd is "ok", "unreachable" or "connecting" (no answer yet).
	Breakerd string `json:"breakerd"`
	// Since is when breakerd became unreachable (the gateway's clock).
	Since time.Time `json:"since,omitzero"`
	// Sessions is the number of connected downstream sessions.
	Sessions int `json:"sessions"`
	// Tools is the number of upstream tools served; Refused those left out.
	Tools   int `json:"tools"`
	Refused int `json:"refused"`
}

// Health reports the gateway's state.
func (g *Gateway) Health() Health {
	g.mu.Lock()
	h := Health{Status: "ok", Breakerd: "ok", Sessions: len(g.sessions), Tools: len(g.catalog), Refused: len(g.refused)}
	switch {
	case !g.downAt.IsZero():
		h.Status, h.Breakerd, h.Since = "degraded", "unreachable", g.downAt
	case !g.watchUp:
		h.Breakerd = "connecting"
	}
	var clients []*client.Client
	for s := range g.sessions {
		clients = append(clients, s.c)
	}
	g.mu.Unlock()
	for _, c := range append(clients, g.shared) {
		if since, down := c.Unreachable(); down {
			h.Status, h.Breakerd = "degraded", "unreachable"
			if h.Since.IsZero() || since.Before(h.Since) {
				h.Since = since
			}
		}
	}
	return h
}

// session is one downstream MCP session.
type session struct {
	g      *Gateway
	srv    *mcp.Server
	c      *client.Client // the shared one, or the session's own
	own    bool           // c is the session's own (worker_id: session)
	run    *client.Run
	label  string          // the session in log lines
	ctx    context.Context // ends when the session closes
	cancel context.CancelFunc

	mu       sync.Mutex
	shown    map[string]bool // tools on srv's list
	inflight map[string]int  // breaker -> this session's calls in progress
	pending  map[string]bool // breaker -> an event came during a call
	joined   bool
	reserved bool   // holds one of g.starting's places; guarded by g.mu
	client   string // the HTTP client (clientKey) whose share it counts in; guarded by g.mu
}

// newSession builds a session's server with the tools breakerd allows now
// (no session is connected yet, so building it notifies no one).
func (g *Gateway) newSession() *session {
	s := &session{g: g, shown: map[string]bool{}, inflight: map[string]int{}, pending: map[string]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.c, s.label = g.shared, g.o.WorkerID
	if g.o.Config.WorkerID == WorkerSession {
		// The session's own client (its own local fallback), reporting as
		// the gateway: breakerd counts a gateway as one worker for trips
		// and pauses, so neither its sessions nor a leaked token bound to
		// its one id can make up a quorum.
		s.label = g.o.WorkerID + "/" + randomID()
		s.c, s.own = g.newClient(g.o.WorkerID), true
	}
	s.run = client.NewRun(s.c)
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "breakerd-mcp", Version: g.o.Version}, &mcp.ServerOptions{
		Instructions: "Tools come from upstream MCP servers through a breakerd gateway. A tool whose dependency is down " +
			"is removed from your tools for the rest of this session; call " + StatusTool + " to see which and why.",
		Capabilities:       &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		PageSize:           max(mcp.DefaultPageSize, len(g.catalog)+1),
		InitializedHandler: func(ctx context.Context, r *mcp.InitializedRequest) { s.join(r.Session) },
	})
	s.srv.AddReceivingMiddleware(s.middleware)
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	avail, err := s.run.Available(ctx, s.toolset())
	cancel()
	if err != nil {
		g.log.Warn("mcpgw: new session: breakerd did not judge the toolset; listing every tool", "err", err)
		avail = s.toolset()
	}
	for _, t := range avail {
		s.shown[t.Name] = true
		s.srv.AddTool(g.catalog[t.Name].mcp, s.callTool)
	}
	s.srv.AddTool(s.statusTool(), s.callStatus)
	return s
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// join registers the session for Watch events until it closes.
func (s *session) join(ss *mcp.ServerSession) {
	s.mu.Lock()
	if s.joined {
		s.mu.Unlock()
		return
	}
	s.joined = true
	s.mu.Unlock()
	s.g.mu.Lock()
	s.g.sessions[s] = struct{}{}
	s.g.unreserveLocked(s) // counted in sessions from now on
	s.g.mu.Unlock()
	s.g.m.sessionsOpened.Inc()
	go func() {
		_ = ss.Wait()
		s.g.mu.Lock()
		delete(s.g.sessions, s)
		s.g.mu.Unlock()
		s.close()
	}()
}

// isJoined reports whether the session has joined the gateway.
func (s *session) isJoined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined
}

// close releases what the session holds of its own.
func (s *session) close() {
	s.cancel()
	if s.own {
		_ = s.c.Close()
	}
}

// Connect serves one downstream session over t (in-memory in tests) and
// returns once it is connected; the session ends when the client closes
// it or ctx ends.
func (g *Gateway) Connect(ctx context.Context, t mcp.Transport) (*mcp.ServerSession, error) {
	s := g.newSession()
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("mcpgw: connect session: %w", err)
	}
	s.join(ss)
	return ss, nil
}

// toolset is the catalog as pkg/client tools, sorted by name.
func (s *session) toolset() []client.Tool {
	out := make([]client.Tool, 0, len(s.g.order))
	for _, name := range s.g.order {
		out = append(out, client.Tool{Name: name, Breaker: s.g.catalog[name].breaker})
	}
	return out
}

// wants reports whether an event on breaker calls for a refresh now: the
// session still lists one of its tools and has no call on it in progress.
// During a call the event is held until the call ends (see callTool): the
// call may be the fleet's probe, whose own half-open state must not take
// the tool from the session that is probing it.
func (s *session) wants(breaker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[breaker] > 0 {
		s.pending[breaker] = true
		return false
	}
	for name := range s.shown {
		if s.g.catalog[name].breaker == breaker {
			return true
		}
	}
	return false
}

// middleware asks breakerd again before each tools/list (new state since
// the session began is seen), and answers every tools/call of an upstream
// tool itself: a tool removed from the list must still answer with its
// circuit_open result, not with the SDK's "unknown tool".
func (s *session) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
				s.g.log.Warn("mcpgw: tools/list refresh", "session", s.label, "err", err)
			}
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				if _, known := s.g.catalog[r.Params.Name]; known {
					return s.callTool(ctx, r)
				}
			}
		}
		return next(ctx, method, req)
	}
}

// refresh asks breakerd about the tools still listed (one BatchGet, no
// probe lease) and takes off the list those the run removed.
func (s *session) refresh(ctx context.Context) error {
	_, err := s.run.Available(ctx, s.toolset())
	s.sync()
	return err
}

// sync takes off srv's list every tool the run has removed, with the
// status tool's description updated in the same notification window: the
// SDK sends the session one notifications/tools/list_changed.
func (s *session) sync() {
	lost := s.run.Degraded()
	s.mu.Lock()
	var gone []string
	for _, u := range lost {
		if s.shown[u.Tool] {
			delete(s.shown, u.Tool)
			gone = append(gone, u.Tool)
		}
	}
	s.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	s.g.log.Info("mcpgw: tools removed from a session", "session", s.label, "tools", strings.Join(gone, ","))
	s.g.m.listChanges.Inc()
	s.srv.RemoveTools(gone...)
	s.srv.AddTool(s.statusTool(), s.callStatus)
}

// callTool is tools/call of an upstream tool: through the run (a removed
// tool is denied without a round trip), Allow, the upstream call within
// its timeout, and Record with the gateway's classification. A denial is
// a result with isError and the circuit_open JSON; an upstream failure a
// result with isError saying what failed.
func (s *session) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	t := s.g.catalog[req.Params.Name]
	s.begin(t.breaker)
	defer s.end(t.breaker)
	// The call's context bounds connecting plus the call; the call's own
	// deadline, which a 429 is judged against, goes in the box.
	ctx = context.WithValue(ctx, deadlineKey{}, &deadlineBox{})
	ctx, cancel := context.WithTimeout(ctx, t.up.cfg.connectTimeout()+t.up.cfg.timeout())
	defer cancel()
	var res *mcp.CallToolResult
	err := s.run.Call(ctx, client.Tool{Name: req.Params.Name, Breaker: t.breaker}, func(ctx context.Context) error {
		r, err := t.up.call(ctx, t.mcp.Name, req.Params.Arguments)
		res = r
		return err
	})
	if d, denied := client.AsDenial(err, req.Params.Name); denied {
		s.g.m.call(t.up.cfg.Name, resultDenied)
		s.g.log.Debug("mcpgw: call denied", "session", s.label, "tool", req.Params.Name, "breaker", t.breaker, "reason", d.Reason)
		s.sync()
		out := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(d.JSON())}}}
		if t.mcp.OutputSchema == nil {
			out.StructuredContent = d
		}
		return out, nil
	}
	if res != nil {
		if res.IsError {
			s.g.m.call(t.up.cfg.Name, resultIsError)
		} else {
			s.g.m.call(t.up.cfg.Name, resultOK)
		}
		return res, nil // the upstream's own result, isError or not
	}
	if err != nil {
		s.g.m.call(t.up.cfg.Name, resultUpstreamError)
		s.g.log.Warn("mcpgw: upstream call failed", "session", s.label, "upstream", t.up.cfg.Name, "tool", req.Params.Name, "err", failure(ctx, err))
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("upstream %s failed to run %s: %s", t.up.cfg.Name, req.Params.Name, failure(ctx, err))}}}, nil
	}
	s.g.m.call(t.up.cfg.Name, resultOK)
	return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
}

func (s *session) begin(breaker string) {
	s.mu.Lock()
	s.inflight[breaker]++
	s.mu.Unlock()
}

// end closes a call on breaker; the last one to end refreshes the session
// if an event came meanwhile.
func (s *session) end(breaker string) {
	s.mu.Lock()
	s.inflight[breaker]--
	held := false
	if s.inflight[breaker] == 0 {
		delete(s.inflight, breaker)
		held = s.pending[breaker]
		delete(s.pending, breaker)
	}
	s.mu.Unlock()
	if held {
		s.g.recheck(func(o *session) bool { return o == s })
	}
}

// failure words an upstream call's error for the agent: a timeout says
// so plainly, anything else as the SDK or breakerd worded it.
func failure(ctx context.Context, err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "no answer within the gateway's timeout"
	}
	return err.Error()
}

// Status is the result of the breakerd_status tool (its structured
// content; the text content is its JSON).
type Status struct {
	// Notice is the text for the model (pkg/client's Run.Notice); empty
	// when the session lost no tool.
	Notice string `json:"notice,omitempty"`
	// Missing are the tools removed from this session, in order.
	Missing []client.Unavailable `json:"missing"`
	// NotServed are upstream tools the gateway does not serve, and why.
	NotServed []refusal `json:"not_served,omitempty"`
	// Degraded is true while breakerd is unreachable.
	Degraded bool `json:"degraded,omitempty"`
}

func (s *session) status() Status {
	st := Status{Notice: s.run.Notice(), Missing: s.run.Degraded(), NotServed: s.g.refused,
		Degraded: s.g.Health().Status != "ok"}
	if st.Missing == nil {
		st.Missing = []client.Unavailable{}
	}
	return st
}

// statusTool is the breakerd_status tool, its description naming the
// tools this session has lost.
func (s *session) statusTool() *mcp.Tool {
	desc := "Says which tools are missing from this session and why (a dependency breakerd found broken), " +
		"when they may return, and what to use instead."
	var names []string
	for _, u := range s.run.Degraded() {
		names = append(names, u.Tool) // served tools: names in MCP's syntax
	}
	sort.Strings(names)
	if len(names) > 0 {
		desc += " Missing now: " + strings.Join(names, ", ") + "."
	} else {
		desc += " No tool is missing now."
	}
	// Refused names are an upstream's words: only their number goes here.
	if n := len(s.g.refused); n > 0 {
		desc += fmt.Sprintf(" %d upstream tool listings are not served (see not_served in its result).", n)
	}
	return &mcp.Tool{Name: StatusTool, Description: desc,
		InputSchema:  map[string]any{"type": "object", "properties": map[string]any{}},
		OutputSchema: map[string]any{"type": "object"},
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true}}
}

func (s *session) callStatus(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	st := s.status()
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("mcpgw: status: %w", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: st}, nil
}
