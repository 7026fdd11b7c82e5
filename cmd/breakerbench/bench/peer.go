package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// PeerNote says how the peer is built; the report prints it.
const PeerNote = "peer: sony/gobreaker v2.4.0 DistributedCircuitBreaker; it ships no Redis store, so the bench's " +
	"SharedDataStore is go-redis GET/SET plus a SET NX PX 8s lock retried like redsync (up to 32 tries, 50-250 ms apart) " +
	"and released by compare-and-delete"

// Lock retries as redsync does by default: 32 tries, a random 50-250 ms
// apart, an 8 s expiry.
const (
	lockTries    = 32
	lockMinDelay = 50 * time.Millisecond
	lockMaxDelay = 250 * time.Millisecond
	lockExpiry   = 8 * time.Second
)

// errLockTaken is returned by peerStore.Lock when every try found the lock
// held.
var errLockTaken = errors.New("peer store: lock held by another caller after 32 tries")

var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// peerStore is gobreaker.SharedDataStore on go-redis. One instance belongs
// to one caller (one fleet process): it remembers the tokens of the locks
// it holds. Safe for concurrent use.
type peerStore struct {
	rdb    *redis.Client
	prefix string

	mu     sync.Mutex
	tokens map[string]string
}

var _ gobreaker.SharedDataStore = (*peerStore)(nil)

func newPeerStore(rdb *redis.Client, prefix string) *peerStore {
	return &peerStore{rdb: rdb, prefix: prefix, tokens: map[string]string{}}
}

func (s *peerStore) Lock(name string) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	ctx := context.Background()
	for try := 0; try < lockTries; try++ {
		if try > 0 {
			time.Sleep(lockMinDelay + mrand.N(lockMaxDelay-lockMinDelay))
		}
		ok, err := s.rdb.SetNX(ctx, s.prefix+name, token, lockExpiry).Result()
		if err != nil {
			return fmt.Errorf("peer store: lock %s: %w", name, err)
		}
		if ok {
			s.mu.Lock()
			s.tokens[name] = token
			s.mu.Unlock()
			return nil
		}
	}
	return errLockTaken
}

func (s *peerStore) Unlock(name string) error {
	s.mu.Lock()
	token, ok := s.tokens[name]
	delete(s.tokens, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("peer store: unlock %s: not held", name)
	}
	n, err := unlockScript.Run(context.Background(), s.rdb, []string{s.prefix + name}, token).Int64()
	if err != nil {
		return fmt.Errorf("peer store: unlock %s: %w", name, err)
	}
	if n != 1 {
		return fmt.Errorf("peer store: unlock %s: the lock had expired", name)
	}
	return nil
}

func (s *peerStore) GetData(name string) ([]byte, error) {
	b, err := s.rdb.Get(context.Background(), s.prefix+name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("peer store: get %s: %w", name, err)
	}
	return b, nil
}

func (s *peerStore) SetData(name string, data []byte) error {
	if err := s.rdb.Set(context.Background(), s.prefix+name, data, 0).Err(); err != nil {
		return fmt.Errorf("peer store: set %s: %w", name, err)
	}
	return nil
}

// newPeer returns a distributed breaker named name on s, with gobreaker's
// default settings (trip after more than 5 consecutive failures).
func newPeer(s *peerStore, name string) (*gobreaker.DistributedCircuitBreaker[struct{}], error) {
	return gobreaker.NewDistributedCircuitBreaker[struct{}](s, gobreaker.Settings{Name: name})
}
