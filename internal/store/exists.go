package store

import (
	"context"
	"fmt"
)

// Exists reports whether breaker holds state (its state hash exists): one
// EXISTS, for the new-breaker quota. Errors are Redis failures.
func (s *Store) Exists(ctx context.Context, breaker string) (bool, error) {
	n, err := s.rdb.Exists(ctx, keys(breaker)[0]).Result()
	if err != nil {
		return false, fmt.Errorf("store: exists %q: %w", breaker, err)
	}
	return n == 1, nil
}
