package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// batchWorkers bounds how many records of one RecordBatch run at once:
// enough for the daemon to overlap their scripts, few enough that one
// batch does not crowd out other callers.
const batchWorkers = 8

// RecordBatch implements BreakerService.RecordBatch: every record is
// validated and admitted first, exactly as Record's request is (an error
// names it: "records[3].outcome"), so a bad one refuses the batch before
// any is applied; then each runs as its own Record (its own script, in
// no particular order across breakers; one breaker's records in the order
// sent). A store error fails the batch; records already applied stay
// applied, as separate Records would.
func (s *Server) RecordBatch(ctx context.Context, req *pb.RecordBatchRequest) (*pb.RecordBatchResponse, error) {
	recs := req.GetRecords()
	if len(recs) == 0 || len(recs) > MaxBatch {
		return nil, invalid("records", "must hold 1 to %d records, got %d", MaxBatch, len(recs))
	}
	ins := make([]store.RecordInput, len(recs))
	for i, r := range recs {
		_, in, err := s.validRecord(ctx, r) // a batch's records each run on the whole bound
		if err != nil {
			return nil, nested(fmt.Sprintf("records[%d]", i), err)
		}
		ins[i] = in
	}
	// One breaker's records run in order on one goroutine: its outcomes
	// count in the order the worker sent them.
	byBreaker := map[string][]int{}
	var order []string
	for i, r := range recs {
		if _, ok := byBreaker[r.GetBreaker()]; !ok {
			order = append(order, r.GetBreaker())
		}
		byBreaker[r.GetBreaker()] = append(byBreaker[r.GetBreaker()], i)
	}
	out := make([]*pb.RecordResponse, len(recs))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, batchWorkers)
	for _, b := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(idx []int) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, i := range idx {
				res, err := s.scopes.Record(ctx, ins[i])
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("records[%d]: %w", i, err)
					}
					mu.Unlock()
					return
				}
				out[i] = classified(res, ins[i])
			}
		}(byBreaker[b])
	}
	wg.Wait()
	if first != nil {
		return nil, statusOf(ctx, first)
	}
	return &pb.RecordBatchResponse{Results: out}, nil
}
