package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A unary RPC in the form every client sends (a JSON body, uncompressed,
// with at most a plain Connect-Timeout-Ms) is served in process
// (Options.Local): its body decoded into the request the handler the gRPC
// server registered is given, the call run through the server's unary
// interceptors, the answer encoded with the transcoder's codec and options
// and written as the transcoder writes it (headers, status, error body).
// A call in any other form, and every stream, goes through the transcoder,
// which answers it in its own words.

// localCall serves r, a call to method, in process and reports true; or
// reports false, having read nothing of r.Body that the transcoder will
// not read again, when the call is not in the form served here.
func (f *front) localCall(w http.ResponseWriter, r *http.Request, method string) bool {
	timeout, ok := localForm(r)
	if !ok || !f.o.Local.Has(method) {
		return false
	}
	bp := bodies.Get().(*[]byte)
	defer putBody(bp)
	body, err := readBody(r.Body, (*bp)[:0], r.ContentLength)
	*bp = body[:0]
	if err != nil || len(body) == 0 || int64(len(body)) > f.o.MaxBodyBytes {
		// A failed read, an empty body or one past the bound: the
		// transcoder reads it again, what was read first, and answers.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(bytes.Clone(body)), r.Body), r.Body}
		return false
	}
	ctx := r.Context()
	if timeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	full := servicePath + method
	ctx = peer.NewContext(metadata.NewIncomingContext(ctx, incoming(r)), peerOf(r))
	ctx = grpc.NewContextWithServerTransportStream(ctx, &localStream{method: full, h: w.Header()})
	var decodeErr error
	res, err := f.o.Local.Call(ctx, method, func(m any) error {
		if err := ctx.Err(); err != nil {
			// The gRPC server reads a request under the call's deadline:
			// one past it (Connect-Timeout-Ms: 0) is never read.
			return status.FromContextError(err).Err()
		}
		msg, ok := m.(proto.Message)
		if !ok {
			decodeErr = connect.NewError(connect.CodeInternal, errors.New("request is not a protobuf message"))
			return decodeErr
		}
		decodeErr = globalJSONCodec.Unmarshal(body, msg)
		return decodeErr
	})
	switch {
	case decodeErr != nil:
		// Refused before the call ran, as the transcoder refuses a body
		// its codec cannot decode.
		writeConnectError(w, asConnectError(decodeErr), true)
	case err != nil:
		writeConnectError(w, statusError(err), false)
	default:
		writeAnswer(w, res, bp)
	}
	return true
}

// localForm reports whether r is a call in the form served in process,
// and its Connect-Timeout-Ms (-1 when it sends none). The front has
// checked the method, the token, the content type and the declared size.
func localForm(r *http.Request) (time.Duration, bool) {
	h := r.Header
	switch h.Get("Content-Type") {
	case "application/json", "application/json; charset=utf-8":
	default:
		return 0, false
	}
	if e := h.Get("Content-Encoding"); (e != "" && e != "identity") || r.URL.RawQuery != "" || h.Get("Connect-Protocol-Version") != "1" {
		return 0, false
	}
	timeout := time.Duration(-1)
	if v := h.Get("Connect-Timeout-Ms"); v != "" {
		// What the transcoder passes on to the server exactly: up to 8
		// digits (a gRPC timeout's bound, 27 hours).
		if len(v) > 8 {
			return 0, false
		}
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, false
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	for k := range h {
		if strings.HasSuffix(k, "-Bin") || strings.HasSuffix(k, "-bin") {
			return 0, false // binary metadata: decoded by the gRPC server's transport
		}
	}
	return timeout, true
}

// transportHeaders are the request headers that carry the HTTP call or
// the Connect protocol rather than the call's metadata, and the ones gRPC
// reserves: the gRPC server's transport never puts them in the metadata.
var transportHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Accept-Encoding": true,
	"Connect-Protocol-Version": true, "Connect-Timeout-Ms": true, "Te": true,
	"Grpc-Encoding": true, "Grpc-Accept-Encoding": true, "Grpc-Timeout": true, "Grpc-Message-Type": true,
	"Grpc-Message": true, "Grpc-Status": true, "Grpc-Status-Details-Bin": true,
}

// incoming is r's metadata as the gRPC server's transport gives it to a
// transcoded call: every other header under its lower-case name (each
// value as sent), and :authority, the Host.
func incoming(r *http.Request) metadata.MD {
	md := make(metadata.MD, len(r.Header)+1)
	if r.Host != "" {
		md[":authority"] = []string{r.Host}
	}
	for k, vs := range r.Header {
		if transportHeaders[k] {
			continue
		}
		lk := strings.ToLower(k)
		md[lk] = append(md[lk], vs...)
	}
	return md
}

// peerOf is r's peer as the gRPC server's transport names it for a
// transcoded call.
func peerOf(r *http.Request) *peer.Peer {
	p := &peer.Peer{Addr: remoteAddr(r.RemoteAddr)}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		p.LocalAddr = la
	}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	return p
}

// remoteAddr is an HTTP request's RemoteAddr ("ip:port") as a net.Addr.
type remoteAddr string

func (a remoteAddr) Network() string {
	if a == "" {
		return ""
	}
	return "tcp"
}

func (a remoteAddr) String() string { return string(a) }

// localStream is the call's grpc.ServerTransportStream: the metadata a
// handler sends (grpc.SetHeader, SetTrailer) goes out as the transcoder
// sends it, headers as they are and trailers as Trailer- headers, with
// the answer.
type localStream struct {
	method string
	h      http.Header
}

func (s *localStream) Method() string { return s.method }

func (s *localStream) SetHeader(md metadata.MD) error {
	addMetadata(s.h, "", md)
	return nil
}

func (s *localStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *localStream) SetTrailer(md metadata.MD) error {
	addMetadata(s.h, "Trailer-", md)
	return nil
}

// addMetadata adds md to h, each key with prefix, binary values in
// base64 as gRPC's transport writes them.
func addMetadata(h http.Header, prefix string, md metadata.MD) {
	for k, vs := range md {
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			h.Add(prefix+k, v)
		}
	}
}

// bodies are the buffers a request body is read into and its answer
// encoded into (*[]byte).
var bodies = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds a buffer kept for reuse, so that one large body
// does not stay in memory.
const maxPooledBody = 64 << 10

func putBody(bp *[]byte) {
	if cap(*bp) <= maxPooledBody {
		bodies.Put(bp)
	}
}

// readBody appends what rd reads to b until its end; n, when positive,
// is how long the body says it is.
func readBody(rd io.Reader, b []byte, n int64) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	if n > 0 && n < 1<<31 {
		buf.Grow(int(n) + bytes.MinRead) // room for the read that finds the end
	}
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
}

// writeAnswer writes a call's answer as the transcoder writes it: the
// JSON codec's encoding, its length, no Date header (the transcoder's
// answers carry none). It encodes into *bp.
func writeAnswer(w http.ResponseWriter, res any, bp *[]byte) {
	msg, ok := res.(proto.Message)
	if !ok {
		writeConnectError(w, connect.NewError(connect.CodeInternal, errors.New("answer is not a protobuf message")), false)
		return
	}
	out, err := globalJSONCodec.MarshalAppend((*bp)[:0], msg)
	if err != nil {
		writeConnectError(w, connect.NewError(connect.CodeInternal, err), false)
		return
	}
	*bp = out[:0]
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h["Date"] = nil
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// statusError is a gRPC status error as a Connect error, as the
// transcoder reads it from the server: code, message and details.
func statusError(err error) *connect.Error {
	st := status.Convert(err)
	cerr := connect.NewWireError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		if ed, err := connect.NewErrorDetail(d); err == nil {
			cerr.AddDetail(ed)
		}
	}
	return cerr
}

// asConnectError is err as a Connect error; one that is not is Internal.
func asConnectError(err error) *connect.Error {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr
	}
	return connect.NewError(connect.CodeInternal, err)
}
