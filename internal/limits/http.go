package limits

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// HTTPServer returns an http.Server for h with l's connection limits:
// MaxHeaderBytes (which Go's HTTP/2 server also takes as its header list
// bound), ReadHeaderTimeout (HandshakeTimeout) and IdleTimeout. Serve it
// on a listener from Conns.Listen, with h wrapped by HTTPHandler. For
// HTTP/2 over cleartext (h2c) give the http2.Server MaxHeaderBytes as
// MaxHeaderListSize, IdleTimeout, and MaxConcurrentStreams as its
// MaxConcurrentStreams.
func (l Listener) HTTPServer(h http.Handler) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.HandshakeTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
}

// HTTPOptions says how HTTPHandler finds the caller and the calls it
// counts.
type HTTPOptions struct {
	// Authenticate checks r's credentials from its headers alone (the
	// body is not read yet) and returns the key its calls count under
	// (`token "pool-a"`); an error refuses the request with 401 and the
	// error's text. For a request that needs no token it returns ("",
	// nil), and the connection (r.RemoteAddr) is the key. Nil: every
	// request counts under its connection.
	Authenticate func(r *http.Request) (key string, err error)
	// Gate returns the per-token cap r counts against (the read calls,
	// say), or nil for none.
	Gate func(r *http.Request) *Gate
}

// HTTPHandler wraps h so that each request, before h reads a byte of its
// body, is refused when its headers pass MaxHeaderBytes (431), its
// declared body passes MaxRecvBytes (413), its credentials fail
// Authenticate (401), or its caller holds every slot of its Gate (429);
// the body is then cut at MaxRecvBytes as h reads it. Refusals are JSON
// in the Connect error form, {"code": "...", "message": "..."}.
func (l Listener) HTTPHandler(h http.Handler, o HTTPOptions) http.Handler {
	l = l.WithDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerBytes(r); n > l.MaxHeaderBytes {
			refuse(w, http.StatusRequestHeaderFieldsTooLarge, "resource_exhausted",
				fmt.Sprintf("limits: headers are %d bytes; at most %d", n, l.MaxHeaderBytes))
			return
		}
		if r.ContentLength > int64(l.MaxRecvBytes) {
			refuse(w, http.StatusRequestEntityTooLarge, "resource_exhausted",
				fmt.Sprintf("limits: body is %d bytes; at most %d", r.ContentLength, l.MaxRecvBytes))
			return
		}
		key := ""
		if o.Authenticate != nil {
			k, err := o.Authenticate(r)
			if err != nil {
				refuse(w, http.StatusUnauthorized, "unauthenticated", err.Error())
				return
			}
			key = k
		}
		if o.Gate != nil {
			if g := o.Gate(r); g != nil {
				if key == "" {
					key = "connection " + r.RemoteAddr
				}
				release, err := g.acquire(key)
				if err != nil {
					refuse(w, http.StatusTooManyRequests, "resource_exhausted", errMessage(err))
					return
				}
				defer release()
			}
		}
		// One byte over: a reader behind (the HTTP API's transcoder) reads
		// that far to tell a body at the bound from a larger one, and
		// refuses the latter in its own words.
		r.Body = http.MaxBytesReader(w, r.Body, int64(l.MaxRecvBytes)+1)
		h.ServeHTTP(w, r)
	})
}

// headerBytes counts r's header list as HTTP/2 does: name, value and 32
// bytes per field.
func headerBytes(r *http.Request) int {
	n := len(r.Host) + 32
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

// refuse writes a Connect-form JSON error.
func refuse(w http.ResponseWriter, httpStatus int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
