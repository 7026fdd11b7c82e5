package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// MaxPageSize bounds ListPage's count.
const MaxPageSize = 1000

// ErrBadPageToken is returned by ListPage for a token it did not make, or
// one from before a Cluster's masters changed.
var ErrBadPageToken = errors.New("store: page token is not one List returned (or the cluster's masters changed): list again from the start")

// ListPage returns one page of List: the breakers whose state keys one
// SCAN step of about count keys (at most MaxPageSize) finds, from token
// ("" for the first page), filtered by states (all when empty), and the
// token of the next page ("" after the last). A page may be empty while
// more follow. Pages follow SCAN's guarantee: a breaker that holds state
// for the whole listing is returned at least once, rarely twice. On a
// Cluster the masters are scanned one after another, in address order.
// Errors: ErrBadPageToken; Redis errors wrapped.
func (s *Store) ListPage(ctx context.Context, token string, count int64, states ...pb.State) ([]*pb.BreakerState, string, error) {
	if count < 1 || count > MaxPageSize {
		return nil, "", fmt.Errorf("store: page size must be 1 to %d, got %d", MaxPageSize, count)
	}
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, "", err
	}
	node, cursor := 0, uint64(0)
	if token != "" {
		if node, cursor, err = decodePageToken(token, nodes); err != nil {
			return nil, "", err
		}
	}
	if n := s.out.DownNode(nodes[node].addr); n != nil { // its breakers are answered from memory (outage_read.go, internal/outage)
		return s.memoryPage(n, states, nodes, node)
	}
	keys, next, err := nodes[node].c.Scan(ctx, cursor, stateKeyPattern, count).Result()
	if err != nil {
		return nil, "", fmt.Errorf("store: scan: %w", err)
	}
	var names []string
	for _, k := range keys {
		if n, ok := nameOf(k, "state"); ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	all, err := s.listed(ctx, names)
	if err != nil {
		return nil, "", err
	}
	var out []*pb.BreakerState
	for _, st := range all {
		if len(states) == 0 || containsState(states, st.State) {
			out = append(out, st)
		}
	}
	switch {
	case next != 0:
		return out, encodePageToken(nodes[node].addr, next), nil
	case node+1 < len(nodes):
		return out, encodePageToken(nodes[node+1].addr, 0), nil
	}
	return out, "", nil
}

// wrongType reports whether err is Redis's WRONGTYPE: a key holding
// another kind of value than the script reads. (miniredis reports it
// inside an ERR about the script.)
func wrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "WRONGTYPE ")
}

// scanNode is one Redis server whose keyspace a listing scans.
type scanNode struct {
	addr string // "" for a single server
	c    redis.Cmdable
}

// scanNodes returns the one server, or a Cluster's masters by address.
func (s *Store) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{c: s.rdb}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, c: c})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: cluster masters: %w", err)
	}
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// A page token is opaque to callers: base64url of "<addr>|<cursor>".
func encodePageToken(addr string, cursor uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(addr + "|" + strconv.FormatUint(cursor, 10)))
}

func decodePageToken(token string, nodes []scanNode) (int, uint64, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, 0, ErrBadPageToken
	}
	addr, c, ok := strings.Cut(string(b), "|")
	cursor, err := strconv.ParseUint(c, 10, 64)
	if !ok || err != nil {
		return 0, 0, ErrBadPageToken
	}
	for i, n := range nodes {
		if n.addr == addr {
			return i, cursor, nil
		}
	}
	return 0, 0, ErrBadPageToken
}
