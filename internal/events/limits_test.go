package events

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func newTestHub() *Hub {
	return NewHub(nil, "unused", slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestSubscribeAsEnforcesTheCaps(t *testing.T) {
	h := newTestHub()
	h.SetLimits(Limits{Streams: 3, PerOwner: 2})
	a1, err1 := h.SubscribeAs("a", []string{"x"})
	a2, err2 := h.SubscribeAs("a", nil)
	if err1 != nil || err2 != nil {
		t.Fatalf("two streams for a: %v, %v", err1, err2)
	}
	if _, err := h.SubscribeAs("a", []string{"y"}); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("a third stream for a: %v, want ErrTooManyStreams (per owner)", err)
	}
	b1, err := h.SubscribeAs("b", nil)
	if err != nil {
		t.Fatalf("b's first stream: %v", err)
	}
	if _, err := h.SubscribeAs("c", nil); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("a fourth stream: %v, want ErrTooManyStreams (total)", err)
	}
	// In-process readers are outside the caps: one held open takes no
	// slot (internal/scope's view of parents holds one for good).
	in := h.Subscribe(nil)
	// Closing frees the slot, for the owner and the total.
	a1.Close()
	if _, err := h.SubscribeAs("a", nil); err != nil {
		t.Errorf("a's stream after one closed, with an in-process reader open: %v", err)
	}
	in.Close()
	a2.Close()
	b1.Close()
	if n := h.Streams(); n != 1 {
		t.Errorf("%d streams open, want 1", n)
	}
}

func TestFilterIsASetAndTheIndexEmpties(t *testing.T) {
	h := newTestHub()
	s, err := h.SubscribeAs("a", []string{"x", "x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	h.publish(&pb.Event{Breaker: "x"})
	h.publish(&pb.Event{Breaker: "z"})
	h.publish(&pb.Event{Breaker: "y"})
	if n := len(s.C); n != 2 {
		t.Errorf("a filter naming x twice and y got %d events of x, z, y; want 2 (x once, y)", n)
	}
	s.Close()
	if len(h.byName) != 0 || len(h.all) != 0 || len(h.perOwner) != 0 {
		t.Errorf("after Close the index holds %d names, %d unfiltered, %d owners; want none", len(h.byName), len(h.all), len(h.perOwner))
	}
}

// BenchmarkPublishWithUnrelatedSubscribers: the cost of publishing one
// event does not grow with subscribers watching other breakers (compare
// the sub-benchmarks' ns/op).
func BenchmarkPublishWithUnrelatedSubscribers(b *testing.B) {
	for _, n := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("unrelated=%d", n), func(b *testing.B) {
			h := newTestHub()
			names := make([]string, 64)
			for i := range names {
				names[i] = fmt.Sprintf("other-%d", i)
			}
			for range n {
				h.Subscribe(names)
			}
			s := h.Subscribe([]string{"x"})
			e := &pb.Event{Breaker: "x"}
			b.ResetTimer()
			for range b.N {
				h.publish(e)
				<-s.C
			}
		})
	}
}
