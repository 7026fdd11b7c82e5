package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// violation is one field's problem, as google.rpc.BadRequest's
// FieldViolation carries it.
type violation struct {
	// Field is the request field's path ("breaker", "ticket.generation",
	// "records[2].worker_id"); empty when the problem is the whole body.
	Field string `json:"field"`
	// Description says what is wrong with it.
	Description string `json:"description"`
}

func (v violation) badRequest() *errdetails.BadRequest {
	return &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: v.Field, Description: v.Description}}}
}

// errorBody is the JSON body of every error the HTTP API answers: the
// Connect protocol's unary error (code, message, details: what a Connect
// client reads) with the field violations of its google.rpc.BadRequest
// details as plain JSON beside them (what any other client reads, with
// no protobuf decoder).
type errorBody struct {
	// Code is the gRPC status code's name in the Connect protocol's form
	// ("invalid_argument", "unauthenticated", "resource_exhausted").
	Code string `json:"code"`
	// Message is the status message; a field's error starts with the
	// field ("breaker: is required").
	Message string `json:"message"`
	// FieldViolations are the fields the request got wrong.
	FieldViolations []violation `json:"field_violations,omitempty"`
	// Details are the status details as Connect writes them (type,
	// base64 protobuf value).
	Details json.RawMessage `json:"details,omitempty"`
}

// writeError answers an error of the HTTP layer itself (before the
// transcoder: token, size, content type) in the errorBody form.
func writeError(w http.ResponseWriter, httpStatus int, code connect.Code, msg string, vs ...violation) {
	b, _ := json.Marshal(errorBody{Code: code.String(), Message: msg, FieldViolations: vs})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b)
}

// errorWriter passes a transcoded response through, except an error
// body (a status of 400 or more, in JSON), which it holds and rewrites
// (finish) as errorBody: the Connect error plus its field violations.
type errorWriter struct {
	http.ResponseWriter
	held   *bytes.Buffer
	status int
	// header is the header as it was when the error was held: the gRPC
	// server behind the transcoder may still set its own (Grpc-Status,
	// its content type) on the shared map, which must not go out.
	header http.Header
}

// maxErrorBody bounds the error body held for rewriting; past it the
// body passes through as the transcoder wrote it.
const maxErrorBody = 64 << 10

func (w *errorWriter) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.held, w.status, w.header = &bytes.Buffer{}, status, w.Header().Clone()
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *errorWriter) Write(b []byte) (int, error) {
	if w.held == nil {
		return w.ResponseWriter.Write(b)
	}
	if w.held.Len()+len(b) > maxErrorBody {
		w.release(w.held.Bytes())
		return w.ResponseWriter.Write(b)
	}
	return w.held.Write(b)
}

// Flush sends what is written so far for a stream (Watch over Connect's
// streaming protocol). A unary answer (application/json) is not flushed
// early: written whole when the call ends, it goes out in one write with
// its Content-Length rather than chunked in two; a held error waits for
// finish.
func (w *errorWriter) Flush() {
	if w.held == nil && !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // best effort, as http.Flusher
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// release writes the held header, status and body as they are.
func (w *errorWriter) release(body []byte) {
	w.held = nil
	h := w.ResponseWriter.Header()
	clear(h)
	for k, v := range w.header {
		h[k] = v
	}
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body)
}

// finish writes a held error body as errorBody.
func (w *errorWriter) finish() {
	if w.held == nil {
		return
	}
	raw := w.held.Bytes()
	var in struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || in.Code == "" {
		w.release(raw)
		return
	}
	w.header.Del("Content-Length")
	w.release(rpcErrorBody(in.Code, in.Message, in.Details))
}

// rpcErrorBody is the errorBody of an RPC's error: its code, message and
// details as the Connect protocol writes them, and the field violations
// the details hold.
func rpcErrorBody(code, msg string, details json.RawMessage) []byte {
	out, _ := json.Marshal(errorBody{Code: code, Message: msg, FieldViolations: violations(details), Details: details})
	return out
}

// wireDetail is an error detail as the Connect protocol writes it, with
// the detail's JSON beside its protobuf value for a reader without the
// type (debug).
type wireDetail struct {
	Type  string          `json:"type"`
	Value string          `json:"value"`
	Debug json.RawMessage `json:"debug,omitempty"`
}

// writeConnectError answers cerr, an RPC's error, as the transcoder
// answers it (the Connect protocol's unary error: status, JSON body), in
// the errorBody form. date false leaves out the Date header, as the
// transcoder does for an error the gRPC server sent.
func writeConnectError(w http.ResponseWriter, cerr *connect.Error, date bool) {
	var details json.RawMessage
	if ds := cerr.Details(); len(ds) > 0 {
		out := make([]wireDetail, len(ds))
		for i, d := range ds {
			out[i] = wireDetail{Type: d.Type(), Value: base64.RawStdEncoding.EncodeToString(d.Bytes())}
			if m, err := d.Value(); err == nil {
				if b, err := (protojson.MarshalOptions{Resolver: protoregistry.GlobalTypes}).Marshal(m); err == nil {
					out[i].Debug = b
				}
			}
		}
		details, _ = json.Marshal(out)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	if !date {
		h["Date"] = nil
	}
	w.WriteHeader(httpStatus(cerr.Code()))
	_, _ = w.Write(rpcErrorBody(cerr.Code().String(), cerr.Message(), details))
}

// violations reads the field violations out of Connect error details:
// each google.rpc.BadRequest's, decoded from its base64 protobuf value.
func violations(details json.RawMessage) []violation {
	var ds []struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	if len(details) == 0 || json.Unmarshal(details, &ds) != nil {
		return nil
	}
	var out []violation
	for _, d := range ds {
		if d.Type != "google.rpc.BadRequest" {
			continue
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		var br errdetails.BadRequest
		if err != nil || proto.Unmarshal(b, &br) != nil {
			continue
		}
		for _, fv := range br.GetFieldViolations() {
			out = append(out, violation{Field: fv.GetField(), Description: fv.GetDescription()})
		}
	}
	return out
}
