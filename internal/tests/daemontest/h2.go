package daemontest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Outcome is how a daemon answered one raw gRPC call's headers.
type Outcome struct {
	// Reset is set when the daemon reset the stream (RST_STREAM) or ended
	// the connection (GOAWAY, or closed) without an answer.
	Reset bool
	// GRPCStatus is the grpc-status the daemon answered with ("16" for
	// Unauthenticated), when it answered.
	GRPCStatus string
}

func (o Outcome) String() string {
	if o.Reset {
		return "reset"
	}
	return "grpc-status " + o.GRPCStatus
}

// RawCall opens a connection to addr and sends one gRPC call to method the
// way a client ignoring the daemon's settings would: its headers carry
// extra metadata of about extraBytes (fields of 4 KiB each, "x-pad-N"),
// and "authorization: Bearer token" unless token is "", with no message.
// It reports whether the daemon reset the stream or answered, and with
// which status. timeout bounds the whole exchange.
func RawCall(addr, method, token string, extraBytes int, timeout time.Duration) (Outcome, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return Outcome{}, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return Outcome{}, err
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	enc.SetMaxDynamicTableSizeLimit(0)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if token != "" {
		_ = enc.WriteField(hpack.HeaderField{Name: "authorization", Value: "Bearer " + token, Sensitive: true})
	}
	pad := strings.Repeat("p", 4<<10)
	for i := 0; i*len(pad) < extraBytes; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: pad, Sensitive: true})
	}
	if err := writeHeaders(fr, block.Bytes()); err != nil {
		return Outcome{Reset: true}, nil // the daemon closed as we wrote
	}
	return readOutcome(fr)
}

// writeHeaders sends block as one HEADERS frame and CONTINUATION frames of
// at most 16 KiB each, on stream 1, ending the stream.
func writeHeaders(fr *http2.Framer, block []byte) error {
	const max = 16 << 10
	first := block[:min(len(block), max)]
	block = block[len(first):]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(block) == 0}); err != nil {
		return err
	}
	for len(block) > 0 {
		next := block[:min(len(block), max)]
		block = block[len(next):]
		if err := fr.WriteContinuation(1, len(block) == 0, next); err != nil {
			return err
		}
	}
	return nil
}

// readOutcome reads frames until the daemon answers stream 1 with its
// grpc-status, resets it, or ends the connection.
func readOutcome(fr *http2.Framer) (Outcome, error) {
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return Outcome{}, err
		case err != nil:
			return Outcome{Reset: true}, nil // closed
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return Outcome{Reset: true}, nil
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return Outcome{Reset: true}, nil
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s != "200" {
				return Outcome{GRPCStatus: "http " + s}, nil
			}
			for _, h := range f.RegularFields() {
				if h.Name == "grpc-status" {
					return Outcome{GRPCStatus: h.Value}, nil
				}
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		}
	}
}
