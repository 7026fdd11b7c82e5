package limits

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestPerKeyCapsEachKey(t *testing.T) {
	p := NewPerKey(2)
	r1, ok1 := p.Acquire("a")
	_, ok2 := p.Acquire("a")
	_, ok3 := p.Acquire("a")
	_, okB := p.Acquire("b")
	if !ok1 || !ok2 || ok3 || !okB {
		t.Fatalf("Acquire a, a, a, b = %v %v %v %v; want true true false true", ok1, ok2, ok3, okB)
	}
	r1()
	r1() // a second release gives nothing back
	if p.Held("a") != 1 {
		t.Errorf("Held(a) after one release (twice) = %d, want 1", p.Held("a"))
	}
	if _, ok := p.Acquire("a"); !ok {
		t.Error("Acquire(a) after a release = false, want true")
	}
	if _, ok := NewPerKey(-1).Acquire("a"); !ok {
		t.Error("a cap below 1 refused, want no cap")
	}
}

func TestConnsLowersTheCapToTheFileLimit(t *testing.T) {
	files, ok := fileLimit()
	if !ok {
		t.Skip("no file limit to read on this platform")
	}
	c, why := NewConns(Listener{MaxConns: files + 10, FDReserve: 5})
	if c.Limit() != files-5 || why == "" {
		t.Errorf("NewConns(MaxConns %d, FDReserve 5) = %d (%q), want %d, lowered", files+10, c.Limit(), why, files-5)
	}
	c, why = NewConns(Listener{MaxConns: 3, FDReserve: -1})
	if c.Limit() != 3 || why != "" {
		t.Errorf("NewConns(MaxConns 3) = %d (%q), want 3, not lowered", c.Limit(), why)
	}
}

// countingBody records whether anything read it.
type countingBody struct {
	io.Reader
	read atomic.Bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.Reader.Read(p)
}
func (b *countingBody) Close() error { return nil }

// TestSecurityOversizedHTTPRequestRefusedBeforeTheTokenCheck (H1): on an HTTP
// listener, headers past MaxHeaderBytes and a declared body past
// MaxRecvBytes are refused before Authenticate runs or the body is read.
func TestSecurityOversizedHTTPRequestRefusedBeforeTheTokenCheck(t *testing.T) {
	var checks atomic.Int64
	h := Listener{MaxHeaderBytes: 4 << 10, MaxRecvBytes: 8 << 10}.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
	}), HTTPOptions{Authenticate: func(r *http.Request) (string, error) {
		checks.Add(1)
		if r.Header.Get("Authorization") != "Bearer good" {
			return "", errors.New("authorization: unknown bearer token")
		}
		return `token "w"`, nil
	}})
	call := func(header string, declared int64) (int, bool) {
		body := &countingBody{Reader: strings.NewReader("{}")}
		r := httptest.NewRequest(http.MethodPost, "/breakerd.v1.BreakerService/List", body)
		r.ContentLength = declared
		r.Header.Set("X-Pad", header)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, body.read.Load()
	}
	if code, read := call(strings.Repeat("p", 8<<10), 2); code != http.StatusRequestHeaderFieldsTooLarge || read || checks.Load() != 0 {
		t.Errorf("8 KiB of headers: %d, body read %v, %d token checks; want 431, unread, none", code, read, checks.Load())
	}
	if code, read := call("", 1<<20); code != http.StatusRequestEntityTooLarge || read || checks.Load() != 0 {
		t.Errorf("1 MiB declared: %d, body read %v, %d token checks; want 413, unread, none", code, read, checks.Load())
	}
	if code, read := call("", 2); code != http.StatusUnauthorized || read || checks.Load() != 1 {
		t.Errorf("no token: %d, body read %v, %d token checks; want 401, unread, one", code, read, checks.Load())
	}
}

// TestSecurityHTTPReadsPastATokensShareRefusedUnread (M4): past a
// token's Gate an HTTP request is 429 with its body unread; another
// token has its own slots.
func TestSecurityHTTPReadsPastATokensShareRefusedUnread(t *testing.T) {
	gate := &Gate{Methods: []string{"List"}, Cap: NewPerKey(1), What: "read calls"}
	hold, held := make(chan struct{}), make(chan struct{})
	h := Listener{}.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.Header.Get("X-Hold") != "" {
			close(held)
			<-hold
		}
	}), HTTPOptions{
		Authenticate: func(r *http.Request) (string, error) { return "token " + r.Header.Get("Authorization"), nil },
		Gate:         func(*http.Request) *Gate { return gate },
	})
	call := func(token string, holdIt bool) (int, bool) {
		body := &countingBody{Reader: strings.NewReader("{}")}
		r := httptest.NewRequest(http.MethodPost, "/breakerd.v1.BreakerService/List", body)
		r.Header.Set("Authorization", token)
		if holdIt {
			r.Header.Set("X-Hold", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, body.read.Load()
	}
	go call("a", true)
	<-held
	if code, read := call("a", false); code != http.StatusTooManyRequests || read {
		t.Errorf("a second read of token a past a cap of 1: %d, body read %v; want 429, unread", code, read)
	}
	if code, _ := call("b", false); code != http.StatusOK {
		t.Errorf("token b's read: %d, want 200", code)
	}
	close(hold)
}
