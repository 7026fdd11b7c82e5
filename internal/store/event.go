package store

import (
	"encoding/json"
	"fmt"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// wire is the JSON shape lib.lua's emit() publishes.
type wire struct {
	ID         string `json:"id"`
	Breaker    string `json:"breaker"`
	Kind       string `json:"kind"`
	From       string `json:"from"`
	To         string `json:"to"`
	Gen        int64  `json:"gen"`
	Reason     string `json:"reason"`
	Failures   int64  `json:"failures"`
	Workers    int64  `json:"workers"`
	CooldownMs int64  `json:"cooldown_ms"`
	AtMs       int64  `json:"at_ms"`
	Actor      string `json:"actor"`
}

var kinds = map[string]pb.EventKind{
	"transition":         pb.EventKind_EVENT_KIND_TRANSITION,
	"forced":             pb.EventKind_EVENT_KIND_FORCED,
	"credential_revoked": pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED,
	"stuck_open":         pb.EventKind_EVENT_KIND_STUCK_OPEN,
	"suspect_worker":     pb.EventKind_EVENT_KIND_SUSPECT_WORKER,
}

// DecodeEvent parses one event as lib.lua's emit() publishes it.
func DecodeEvent(b []byte) (*pb.Event, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("store: decode event: %w", err)
	}
	k, ok := kinds[w.Kind]
	if !ok {
		return nil, fmt.Errorf("store: decode event: unknown kind %q", w.Kind)
	}
	return &pb.Event{
		Id: w.ID, Breaker: w.Breaker, Kind: k, From: stateNames[w.From], To: stateNames[w.To],
		Generation: w.Gen, Reason: w.Reason, Failures: w.Failures, DistinctWorkers: w.Workers,
		CooldownMs: w.CooldownMs, AtMs: w.AtMs, Actor: w.Actor,
	}, nil
}
