// Fast mode's view (ClientOptions.fast): what breakerd last said of each
// breaker this client uses, kept current by the watch stream (its
// transitions, Forces and run notices), so that a healthy breaker's Allow
// is answered in-process and a success that could change nothing is not
// sent. It holds no breaker rule: a breaker is answered here only while
// breakerd's own last word is "closed, nothing denied" and the stream is
// live; everything else (a denial, the one probe, a breaker with a parent
// or in shadow, a suspect) is breakerd's to decide, and a denial the stream
// carries is the open cache's (the daemon's Denial, rendered through the
// shared templates). docs/typescript.md#fast-mode has the bounds.

import { int64, type BreakerState, type Ticket } from "./wire.js";

/** MAX_FAST_BREAKERS bounds the breakers the view holds; past it a breaker is asked as in strict mode. */
export const MAX_FAST_BREAKERS = 4096;

/** FastEntry is breakerd's last word on one breaker, as the view keeps it. */
interface FastEntry {
  gen: number;
  asOf: number;
  /** Closed, with nothing denied and no one else to judge (a parent, a shadow, a suspect): an Allow is answered here. */
  healthy: boolean;
  /** A success would change the breaker (a failure or slow run in progress). */
  run: boolean;
  /** Every success counts (window mode): none is skipped. */
  window: boolean;
  /** The policy's slow_call, ms (0: none): a slower success is sent. */
  slowMs: number;
  st: BreakerState;
}

/**
 * plainSuccess says evidence is a success by its face, with nothing for
 * breakerd to read: no evidence at all, or a 2xx status alone. Anything
 * else (an error kind, a gRPC status, wait headers) is breakerd's to
 * classify, so it is sent.
 */
export function plainSuccess(ev: Record<string, unknown>): boolean {
  for (const [k, v] of Object.entries(ev)) {
    if (v === undefined || k === "no_deadline") continue;
    if (k === "http_status" && typeof v === "number" && v >= 200 && v < 300) continue;
    return false;
  }
  return true;
}

/** FastView is the fast-mode view. */
export class FastView {
  private readonly entries = new Map<string, FastEntry>();
  private readonly used = new Set<string>();
  /** Allows answered here, successes not sent (for tests and the bench). */
  readonly stats = { allowed: 0, skipped: 0 };

  /** only: the breakers the watch stream follows (ClientOptions.watch's list); none: every breaker. */
  constructor(private readonly only?: readonly string[]) {}

  /** use marks breaker as one this client asks about: the view keeps what it learns of it (a breaker the stream does not follow, never). */
  use(breaker: string): void {
    if (this.only?.length && !this.only.includes(breaker)) return;
    if (this.used.size < MAX_FAST_BREAKERS) this.used.add(breaker);
  }

  /** learn takes a state breakerd returned or the stream carried, unless the view holds a later one. */
  learn(st: BreakerState | undefined): void {
    const name = st?.breaker;
    if (!st || !name || !this.used.has(name)) return;
    const gen = int64(st.generation);
    const asOf = int64(st.as_of_ms);
    const old = this.entries.get(name);
    if (old && (old.gen > gen || (old.gen === gen && old.asOf > asOf))) return;
    const closed = (st.state ?? "STATE_CLOSED") === "STATE_CLOSED";
    const shadow = st["shadow"] === true; // in shadow, breakerd reports what it would have denied: it answers
    const suspect = (st.suspect_worker ?? "") !== "";
    this.entries.set(name, {
      gen,
      asOf,
      healthy: closed && !st.denial && !st.parent && !shadow && !suspect,
      run: !closed || int64(st.failures) > 0 || int64(st["slow_calls"] as string | undefined) > 0 || suspect,
      window: st["window_mode"] === true,
      slowMs: int64(st["slow_call_ms"] as string | undefined),
      st,
    });
  }

  /**
   * event takes one watch event: a run notice moves the run flag (true:
   * handled here); any other event without a state forgets the breaker
   * (the open cache reads it afresh, and that answer teaches the view).
   */
  event(ev: Record<string, unknown>): boolean {
    const name = typeof ev["breaker"] === "string" ? ev["breaker"] : "";
    const kind = ev["kind"];
    const old = this.entries.get(name);
    if (kind === "EVENT_KIND_RUN_STARTED" || kind === "EVENT_KIND_RUN_ENDED") {
      const gen = int64(ev["generation"] as string | undefined);
      if (old && old.gen === gen) this.entries.set(name, { ...old, run: kind === "EVENT_KIND_RUN_STARTED" || !old.healthy });
      else if (old && old.gen < gen) this.entries.delete(name); // a transition the view missed: breakerd answers next
      return true;
    }
    if (old && typeof ev["state"] !== "object") this.entries.delete(name);
    return false;
  }

  /** allow is the ticket of an Allow answered here, or undefined: breakerd is asked. */
  allow(breaker: string, live: boolean): { ticket: Ticket; state: BreakerState } | undefined {
    const e = this.entries.get(breaker);
    if (!live || !e?.healthy) return undefined;
    this.stats.allowed++;
    return { ticket: { generation: String(e.gen) }, state: e.st };
  }

  /**
   * skip says a success under ticket need not be sent: the breaker is
   * closed with no run, counts no window, the call was not slow, and the
   * stream is live. A success under a ticket older than the view's
   * generation is skipped too (breakerd would not count it).
   */
  skip(breaker: string, ticket: Ticket, latencyMs: number | undefined, live: boolean): boolean {
    const e = this.entries.get(breaker);
    if (!live || !e || !e.healthy || e.run || e.window) return false;
    if (e.slowMs > 0 && (latencyMs === undefined || latencyMs > e.slowMs)) return false;
    if (e.gen < int64(ticket.generation)) return false;
    this.stats.skipped++;
    return true;
  }

  /** failed marks a run started by this worker's own failure at once, before any notice comes back. */
  failed(breaker: string, ticket: Ticket): void {
    const e = this.entries.get(breaker);
    if (e && e.gen === int64(ticket.generation)) this.entries.set(breaker, { ...e, run: true });
  }
}
