package store

import (
	"cmp"

	"github.com/breakerd/breakerd/internal/savings"
)

// SavingsKey is the default index of the breakers that saved anything
// (savings.Options.IndexKey).
const SavingsKey = Prefix + "saved"

// newSavings builds the daemon's savings index over the store's Redis
// and clock (internal/savings owns what it counts and how).
func newSavings(s *Store) *savings.Index {
	return savings.New(savings.Options{
		Client:   s.rdb,
		IndexKey: cmp.Or(s.o.SavingsKey, SavingsKey),
		StateKey: func(b string) string { return KeysOf(b).State },
		Now:      s.Now,
		OnSaved:  s.o.OnSaved,
	})
}

// Savings is the daemon's savings index: what the breakers saved, in
// this store's Redis.
func (s *Store) Savings() *savings.Index { return s.saved }
