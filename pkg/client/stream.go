package client

import (
	"context"
	"errors"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// errStalled ends a Watch stream that delivered nothing, not even a
// heartbeat, for missedHeartbeats of the daemon's intervals.
var errStalled = errors.New("client: the Watch stream sent nothing, not even a heartbeat, for 3 heartbeat intervals: dropped as stalled")

// missedHeartbeats is how many heartbeat intervals of silence drop a
// Watch stream (docs/go-client.md#stalled-streams).
const missedHeartbeats = 3

// unannouncedHeartbeat is the interval assumed of a daemon that announced
// none (one that predates heartbeats, or before the stream's first
// message): the daemons' default, --http-heartbeat's 15s.
const unannouncedHeartbeat = 15 * time.Second

// watchStream subscribes to req and reads the stream in the background
// until it ends: events go to the returned channel (buffered, so that
// breakerd's stream never waits while a resync runs), every message
// (heartbeats too) marks the stream heard (Client.heard), and a silence
// longer than missedHeartbeats intervals (the one the daemon announced,
// else unannouncedHeartbeat) ends it with errStalled, subscription
// included. The channel closes when the stream ends; errc then says why.
func (c *Client) watchStream(ctx context.Context, req *pb.WatchRequest) (<-chan *pb.Event, <-chan error, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	dog := time.AfterFunc(missedHeartbeats*unannouncedHeartbeat, func() { cancel(errStalled) })
	fail := func(err error) error {
		dog.Stop()
		if errors.Is(context.Cause(ctx), errStalled) {
			err = errStalled
		}
		cancel(nil)
		return err
	}
	stream, err := c.api.Watch(ctx, req)
	if err != nil {
		return nil, nil, fail(err)
	}
	if err := subscribed(stream); err != nil {
		return nil, nil, fail(err)
	}
	events := make(chan *pb.Event, 1024)
	errc := make(chan error, 1)
	go func() {
		defer close(events)
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- fail(err)
				return
			}
			c.heard.Store(c.o.clock.Now().UnixNano())
			if hb := m.GetHeartbeatMs(); hb > 0 {
				c.silence.Store(int64(missedHeartbeats * time.Duration(hb) * time.Millisecond))
			}
			dog.Reset(c.silenceLimit())
			if m.GetEvent() == nil {
				continue // a heartbeat
			}
			select {
			case events <- m.GetEvent():
			case <-ctx.Done():
				errc <- fail(ctx.Err())
				return
			}
		}
	}()
	return events, errc, nil
}

// silenceLimit is how long a Watch stream may deliver nothing before it
// is dropped: missedHeartbeats of the interval the daemon last announced.
func (c *Client) silenceLimit() time.Duration {
	if d := c.silence.Load(); d > 0 {
		return time.Duration(d)
	}
	return missedHeartbeats * unannouncedHeartbeat
}

// hearing tells how a view (fast mode's, or the open cache) that holds
// an answer stands at now: fresh while its stream is live or was heard
// within the silence limit (a stream moving to another daemon keeps its
// word); degraded past that, up to the stale bound (WithStaleViewBound)
// after it was last heard; unheard past the bound, when it no longer
// answers from what it holds.
func (c *Client) hearing(live bool, now time.Time) (degraded, unheard bool) {
	if live {
		return false, false
	}
	h := c.heard.Load()
	if h == 0 {
		return true, true
	}
	quiet := now.Sub(time.Unix(0, h))
	return quiet > c.silenceLimit(), quiet > c.o.staleBound
}
