package store

import (
	"context"
	"fmt"
)

// Exists reports whether breaker holds state (its state hash exists): one
// EXISTS, for the new-breaker quota, which a call waits on before its
// Allow. It is bounded as a decision is (Options.DecisionTimeout: a
// stalled Redis fails it within the bound, not at the caller's
// deadline), and while the breaker's node is in an outage it sends
// nothing and reports true, so that the call is answered from memory.
// Errors are Redis failures.
func (s *Store) Exists(ctx context.Context, breaker string) (bool, error) {
	n := s.nodeOf(ctx, breaker)
	if n.Down() {
		return true, nil // not Redis's to say: the call is answered from memory
	}
	ctx, cancel := s.WithinDecision(ctx)
	defer cancel()
	ok, err := s.rdb.Exists(ctx, keys(breaker)[0]).Result()
	if err != nil {
		return false, fmt.Errorf("store: exists %q: %w", breaker, err)
	}
	return ok == 1, nil
}
