package policy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/yamlfile"
)

// RecoveryCheck is a cheap request a daemon sends while a breaker is open
// to learn whether its dependency is back (a vendor's status page, a HEAD,
// a gRPC health check). Exactly one of HTTP and GRPC is set. A success
// moves the breaker to half-open at once, so the next real call is the
// probe; a failure changes nothing. It is never a real tool call.
type RecoveryCheck struct {
	// HTTP is an HTTP request whose status must be ExpectStatus.
	HTTP *HTTPCheck
	// GRPC is a grpc.health.v1 Check that must answer SERVING.
	GRPC *GRPCCheck
	// Timeout bounds one check, connection included. Default 5s; at least
	// 1ms and below the policy's recovery_check_interval.
	Timeout time.Duration
}

// credentials reports whether c sends credentials (headers or a URL's
// user:pass@).
func (c *RecoveryCheck) credentials() bool {
	if c == nil || c.HTTP == nil {
		return false
	}
	u, err := url.Parse(c.HTTP.URL)
	return len(c.HTTP.Headers) > 0 || err == nil && u.User != nil
}

// HTTPCheck is an HTTP recovery check.
type HTTPCheck struct {
	// Method is GET or HEAD. Default GET.
	Method string
	// URL is the absolute http:// or https:// URL. Credentials in it
	// (user:pass@) are sent but never logged.
	URL string
	// ExpectStatus is the status code that means "back". Default 200.
	ExpectStatus int
	// Headers are sent with the request (an API key, for example); their
	// values are never logged.
	Headers map[string]string
}

// GRPCCheck is a gRPC health recovery check (grpc.health.v1.Health/Check).
type GRPCCheck struct {
	// Target is the address to dial, host:port (grpc-go target syntax).
	Target string
	// Service is the service name to ask about; "" asks about the server
	// as a whole.
	Service string
	// Plaintext dials without TLS (a sidecar, a test). Default false: TLS
	// with the system's roots.
	Plaintext bool
}

// DefaultRecoveryCheckInterval is how often an open breaker's recovery
// check runs, fleet-wide, unless the policy says otherwise.
const DefaultRecoveryCheckInterval = 30 * time.Second

// DefaultRecoveryCheckTimeout bounds one recovery check unless the policy
// says otherwise.
const DefaultRecoveryCheckTimeout = 5 * time.Second

// MinRecoveryCheckInterval is the shortest recovery_check_interval: a
// check is meant to be cheap for the vendor too.
const MinRecoveryCheckInterval = 100 * time.Millisecond

// Describe names the check for logs, without credentials: "GET
// https://status.example.com/health" (no user:pass@, no query values, no
// headers) or "grpc health vendor.example:443 service search".
func (c *RecoveryCheck) Describe() string {
	switch {
	case c == nil:
		return ""
	case c.HTTP != nil:
		return c.HTTP.Method + " " + RedactURL(c.HTTP.URL)
	case c.GRPC != nil:
		d := "grpc health " + c.GRPC.Target
		if c.GRPC.Service != "" {
			d += " service " + c.GRPC.Service
		}
		return d
	}
	return ""
}

// Target is what the check reaches, for bounding checks per target
// fleet-wide: the HTTP URL as written (credentials and query included, so
// it is a secret: hash it before storing it), or "grpc://<target>/<service>".
func (c *RecoveryCheck) Target() string {
	switch {
	case c == nil:
		return ""
	case c.HTTP != nil:
		return c.HTTP.URL
	case c.GRPC != nil:
		return "grpc://" + c.GRPC.Target + "/" + c.GRPC.Service
	}
	return ""
}

// RedactURL returns raw without its user info and with every query value
// replaced by "REDACTED" (an API key often travels there): what logs may
// show of a check's URL.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment = ""
	return u.String()
}

// CheckInterval is RecoveryCheckInterval, or its default when zero.
func (p Policy) CheckInterval() time.Duration {
	if p.RecoveryCheckInterval == 0 {
		return DefaultRecoveryCheckInterval
	}
	return p.RecoveryCheckInterval
}

// validateRecovery checks the recovery check and its interval, naming the
// field as the YAML file does.
func (p Policy) validateRecovery() error {
	if p.RecoveryCheckInterval != 0 && (p.RecoveryCheckInterval < MinRecoveryCheckInterval || p.RecoveryCheckInterval > MaxCooldown) {
		return fieldErr("recovery_check_interval", "must be between %s and %s, got %s",
			MinRecoveryCheckInterval, MaxCooldown, p.RecoveryCheckInterval)
	}
	c := p.RecoveryCheck
	if c == nil {
		return nil
	}
	switch {
	case (c.HTTP == nil) == (c.GRPC == nil):
		return fieldErr("recovery_check", "needs exactly one of http and grpc")
	case c.Timeout < time.Millisecond:
		return fieldErr("recovery_check.timeout", "must be at least 1ms, got %s", c.Timeout)
	case c.Timeout >= p.CheckInterval():
		return fieldErr("recovery_check.timeout", "must be below recovery_check_interval (%s), got %s",
			p.CheckInterval(), c.Timeout)
	}
	if h := c.HTTP; h != nil {
		u, err := url.Parse(h.URL)
		switch {
		case h.URL == "":
			return fieldErr("recovery_check.http.url", "is required")
		case err != nil:
			return fieldErr("recovery_check.http.url", "is not a URL: %s", RedactURL(h.URL))
		case u.Scheme != "http" && u.Scheme != "https":
			return fieldErr("recovery_check.http.url", "must be http:// or https://, got %s", RedactURL(h.URL))
		case u.Host == "":
			return fieldErr("recovery_check.http.url", "has no host: %s", RedactURL(h.URL))
		case h.Method != http.MethodGet && h.Method != http.MethodHead:
			return fieldErr("recovery_check.http.method", "must be GET or HEAD, got %q", h.Method)
		case h.ExpectStatus < 100 || h.ExpectStatus > 599:
			return fieldErr("recovery_check.http.expect_status", "must be an HTTP status (100 to 599), got %d", h.ExpectStatus)
		}
		for k := range h.Headers {
			if k == "" || strings.ContainsAny(k, " :\r\n") {
				return fieldErr("recovery_check.http.headers", "bad header name %q", k)
			}
		}
	}
	if g := c.GRPC; g != nil && g.Target == "" {
		return fieldErr("recovery_check.grpc.target", "is required")
	}
	return nil
}

// recoveryFile is a recovery check as the YAML file writes it:
//
//	recovery_check:
//	  http:
//	    method: HEAD               # GET (default) or HEAD
//	    url: https://status.example.com/api/health
//	    expect_status: 200         # default 200
//	    headers: {X-Api-Key: ...}  # sent, never logged
//	  timeout: 5s                  # default 5s
//
// or, for a gRPC health check:
//
//	recovery_check:
//	  grpc: {target: "vendor.example:443", service: "search", plaintext: false}
type recoveryFile struct {
	HTTP *struct {
		Method       string            `yaml:"method"`
		URL          string            `yaml:"url"`
		ExpectStatus int               `yaml:"expect_status"`
		Headers      map[string]string `yaml:"headers"`
	} `yaml:"http"`
	GRPC *struct {
		Target    string `yaml:"target"`
		Service   string `yaml:"service"`
		Plaintext bool   `yaml:"plaintext"`
	} `yaml:"grpc"`
	Timeout *yamlfile.Duration `yaml:"timeout"`
}

// check returns the check the file describes, defaults filled in.
func (f *recoveryFile) check() *RecoveryCheck {
	c := &RecoveryCheck{Timeout: DefaultRecoveryCheckTimeout}
	if f.Timeout != nil {
		c.Timeout = time.Duration(*f.Timeout)
	}
	if h := f.HTTP; h != nil {
		c.HTTP = &HTTPCheck{Method: strings.ToUpper(h.Method), URL: h.URL, ExpectStatus: h.ExpectStatus, Headers: h.Headers}
		if c.HTTP.Method == "" {
			c.HTTP.Method = http.MethodGet
		}
		if c.HTTP.ExpectStatus == 0 {
			c.HTTP.ExpectStatus = http.StatusOK
		}
	}
	if g := f.GRPC; g != nil {
		c.GRPC = &GRPCCheck{Target: g.Target, Service: g.Service, Plaintext: g.Plaintext}
	}
	return c
}

// String keeps a check's secrets out of fmt's %v (Policy is printed in
// errors and tests).
func (c *RecoveryCheck) String() string {
	if c == nil {
		return "<none>"
	}
	return fmt.Sprintf("recovery check %s (timeout %s)", c.Describe(), c.Timeout)
}
