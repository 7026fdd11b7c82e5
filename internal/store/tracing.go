package store

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracedScript is script inside a client span named for the script
// ("EVALSHA allow"), a child of ctx's span: the Redis step of a traced
// Allow or Record (docs/observability.md). A coalesced script's span
// covers its wait in the shared pipeline too.
func (s *Store) tracedScript(ctx context.Context, sc script, keys []string, args []any) ([]any, error) {
	ctx, span := s.o.Tracer.Start(ctx, "EVALSHA "+sc.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "EVALSHA"),
			attribute.String("db.stored_procedure.name", sc.name)))
	defer span.End()
	res, err := s.sendScript(ctx, sc, keys, args)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}
