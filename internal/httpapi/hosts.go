package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"connectrpc.com/connect"
)

// Hosts guards a listener a web page could reach by DNS rebinding (its
// own name re-pointed at the daemon's address) or by a cross-site form:
// one on loopback, or one that needs no token, where the browser's
// request is all it takes. docs/security.md#dns-rebinding-and-cross-site-requests
// says when the daemon turns it on.
type Hosts struct {
	// Names are the host names the API answers to besides IP addresses
	// and localhost (a rebinding page's Host is always its own name,
	// never an IP address). Compared case-insensitively.
	Names []string
}

// allows reports whether a request's Host names this daemon: empty (no
// Host sent), an IP address, localhost, or one of h.Names; any port.
func (h *Hosts) allows(host string) bool {
	if host == "" {
		return true
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if _, err := netip.ParseAddr(name); err == nil || name == "localhost" {
		return true
	}
	return slices.ContainsFunc(h.Names, func(n string) bool { return strings.EqualFold(strings.TrimSuffix(n, "."), name) })
}

// guard wraps next so that a request naming another Host is refused (421
// Misdirected Request) and a cross-origin request that is not GET, HEAD
// or OPTIONS is refused (403) by Go's http.CrossOriginProtection, unless
// its origin is one of trusted (the CORS origins; "*" turns the origin
// check off). Both answer JSON naming what they refused.
func (h *Hosts) guard(next http.Handler, trusted []string) (http.Handler, error) {
	cop := http.NewCrossOriginProtection()
	check := true
	for _, o := range trusted {
		if o == "*" {
			check = false
			continue
		}
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("httpapi: CORS origin %q: %w", o, err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, connect.CodePermissionDenied,
			fmt.Sprintf("Origin: a cross-origin %s from %q is refused (allow it with --http-cors-origins)", r.Method, r.Header.Get("Origin")),
			violation{Field: "Origin", Description: "cross-origin request refused"})
	}))
	var inner http.Handler = next
	if check {
		inner = cop.Handler(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.allows(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, connect.CodePermissionDenied,
				fmt.Sprintf("Host: %q is not a name this daemon answers to (IP addresses, localhost and --http-allowed-hosts are)", r.Host),
				violation{Field: "Host", Description: fmt.Sprintf("%q is not a name this daemon answers to", r.Host)})
			return
		}
		inner.ServeHTTP(w, r)
	}), nil
}
