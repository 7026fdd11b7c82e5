package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
)

// httpAPI calls a daemon's HTTP/JSON API (--http-listen) over HTTP/1.1
// keep-alive connections, one per caller at a time.
type httpAPI struct {
	base   string // http://host:port/breakerd.v1.BreakerService/
	client *http.Client
	calls  *atomic.Int64 // counted with the gRPC RPCs
}

// newHTTPAPI returns the API client of the daemon serving HTTP at addr.
func newHTTPAPI(addr string, calls *atomic.Int64) *httpAPI {
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true, ForceAttemptHTTP2: false}
	return &httpAPI{base: "http://" + addr + "/breakerd.v1.BreakerService/", client: &http.Client{Transport: tr}, calls: calls}
}

func (h *httpAPI) close() { h.client.CloseIdleConnections() }

// call POSTs body to method and decodes the answer into out (nil: the
// answer is read and dropped, so the connection is kept). A status other
// than 200 is an error carrying the body.
func (h *httpAPI) call(ctx context.Context, method string, body []byte, out any) error {
	h.calls.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", method, res.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// httpPair is rawPair over the HTTP/JSON API: an Allow, then the Record
// of a success with the ticket it granted.
func httpPair(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		if t.http == nil {
			return nil, fmt.Errorf("no HTTP listener on the daemon")
		}
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			name, worker := strconv.Quote(t.breaker(pick(c, i))), strconv.Quote(workerID(c))
			var a struct {
				Decision string          `json:"decision"`
				Ticket   json.RawMessage `json:"ticket"`
			}
			if err := t.http.call(ctx, "Allow", []byte(`{"breaker":`+name+`,"worker_id":`+worker+`}`), &a); err != nil {
				return err
			}
			if a.Decision != "DECISION_ALLOWED" {
				return fmt.Errorf("allow: %s", a.Decision)
			}
			rec := `{"breaker":` + name + `,"worker_id":` + worker + `,"outcome":"OUTCOME_SUCCESS","ticket":` + string(a.Ticket) + `}`
			return t.http.call(ctx, "Record", []byte(rec), nil)
		}, nil
	}
}
