package store

import "context"

// EventsKey returns the key of the breaker's durable event stream,
// KeysOf(breaker).Events.
func EventsKey(breaker string) string { return KeysOf(breaker).Events }

// EventStreams returns the name of every breaker that has an event stream.
// It SCANs the keyspace (every master, on a Cluster): for background
// sweeps, not hot paths.
func (s *Store) EventStreams(ctx context.Context) ([]string, error) {
	return s.scanNames(ctx, eventsKeyPattern, "events")
}
