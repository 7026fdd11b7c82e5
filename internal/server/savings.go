package server

import (
	"context"
	"fmt"
	"time"

	"github.com/breakerd/breakerd/internal/savings"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// MaxSavingsCount bounds each count of one savings report: far above what
// a client holds between two reports, and far below an overflow of the
// sums.
const MaxSavingsCount = 1_000_000

// defaultSavingsWindow is the window of a Savings read that names none.
const defaultSavingsWindow = time.Hour

// countDenial counts a denied Allow under the breaker that decided it
// (the parent scope for a parent's denial).
func (s *Server) countDenial(req *pb.AllowRequest, res *pb.AllowResponse) {
	if !Denied(res.GetDecision()) {
		return
	}
	name := req.GetBreaker()
	if sc := res.GetScope(); sc != "" {
		name = sc
	}
	s.store.Savings().CountDenial(name)
}

// Denied reports whether d is one of the DENIED_* decisions: the call was
// not made.
func Denied(d pb.Decision) bool {
	switch d {
	case pb.Decision_DECISION_UNSPECIFIED, pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE:
		return false
	}
	return true
}

// ReportSavings implements BreakerService.ReportSavings.
func (s *Server) ReportSavings(ctx context.Context, req *pb.ReportSavingsRequest) (*pb.ReportSavingsResponse, error) {
	if err := validWorker("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	reports, err := validReports(req.GetReports())
	if err != nil {
		return nil, err
	}
	counted, err := s.store.Savings().Report(ctx, reports)
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return &pb.ReportSavingsResponse{Accepted: int32(counted), Ignored: int32(len(reports) - counted)}, nil
}

// validReports checks a savings report batch, naming the field of the
// first bad report ("reports[3].local_denials").
func validReports(rs []*pb.SavingsReport) (map[string]savings.Counts, error) {
	if len(rs) == 0 || len(rs) > MaxBatch {
		return nil, invalid("reports", "must hold 1 to %d reports, got %d", MaxBatch, len(rs))
	}
	out := make(map[string]savings.Counts, len(rs))
	for i, r := range rs {
		at := fmt.Sprintf("reports[%d]", i)
		if err := validName(at+".breaker", r.GetBreaker()); err != nil {
			return nil, err
		}
		if _, dup := out[r.GetBreaker()]; dup {
			return nil, invalid(at+".breaker", "%q is reported twice in one batch; send one report per breaker", r.GetBreaker())
		}
		for _, f := range []struct {
			name string
			v    int64
		}{{"local_denials", r.GetLocalDenials()}, {"tools_removed", r.GetToolsRemoved()}} {
			if f.v < 0 || f.v > MaxSavingsCount {
				return nil, invalid(at+"."+f.name, "must be between 0 and %d, got %d", MaxSavingsCount, f.v)
			}
		}
		out[r.GetBreaker()] = savings.Counts{ClientDenials: r.GetLocalDenials(), ToolsRemoved: r.GetToolsRemoved()}
	}
	return out, nil
}

// Savings implements BreakerService.Savings.
func (s *Server) Savings(ctx context.Context, req *pb.SavingsRequest) (*pb.SavingsResponse, error) {
	window := time.Duration(req.GetWindowMs()) * time.Millisecond
	switch {
	case req.GetWindowMs() == 0:
		window = defaultSavingsWindow
	case window < time.Minute || window > savings.MaxWindow:
		return nil, invalid("window_ms", "must be between %d (1m) and %d (7 days), or 0 for an hour, got %d",
			time.Minute.Milliseconds(), savings.MaxWindow.Milliseconds(), req.GetWindowMs())
	}
	if err := validNames("breakers", req.GetBreakers()); err != nil {
		return nil, err
	}
	counts, win, err := s.store.Savings().Read(ctx, window, req.GetBreakers())
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return savings.Answer(counts, win, s.store.Policy), nil
}
