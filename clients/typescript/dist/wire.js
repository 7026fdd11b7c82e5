// The JSON shapes of breakerd's HTTP/JSON API (proto/breakerd/v1/breaker.proto
// in the proto3 JSON mapping: proto field names, int64 values as strings,
// enums by name, default values omitted). Only the fields this client reads
// or sends are typed; the daemon may send more.
/** int64 reads an Int64 (or a number) as a number; 0 when absent. */
export function int64(v) {
    if (v === undefined || v === null || v === "")
        return 0;
    const n = typeof v === "number" ? v : Number(v);
    return Number.isFinite(n) ? n : 0;
}
