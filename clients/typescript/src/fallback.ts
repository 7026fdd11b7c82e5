// The minimal local fallback: what a worker does while no daemon answers
// within the Allow budget, for the breakers the open cache knows nothing
// of. It is the subset of the Go client's local breaker that the
// conformance cases (conformance/fallback) hold every client to:
// consecutive counted failures up to the policy's threshold open it for
// one base cooldown (no backoff, no jitter: one worker), then one local
// probe decides; no quorum, no rate-limit rule, no pause.

import type { Evidence } from "./wire.js";

/** LocalPolicy is the fallback's policy, from getPolicy when breakerd answered it. */
export interface LocalPolicy {
  /** Consecutive counted failures that open the local circuit. */
  threshold: number;
  /** How long it stays open before one probe, ms. */
  cooldownBaseMs: number;
  /** How long a probe that never reports holds the one probe slot, ms. */
  probeTimeoutMs: number;
}

/** DEFAULT_LOCAL_POLICY is breakerd's default policy's values for these fields. */
export const DEFAULT_LOCAL_POLICY: LocalPolicy = { threshold: 5, cooldownBaseMs: 30_000, probeTimeoutMs: 30_000 };

/** LocalVerdict is the fallback's answer to one Allow. */
export type LocalVerdict =
  | { allowed: true; probe: boolean }
  | { allowed: false; probeInFlight: boolean; retryAfterMs: number; reason: string };

/** What the fallback does with one outcome. */
export type LocalEffect = "count" | "reset" | "none";

/**
 * localEffect says what the fallback does with a call's evidence: every
 * error kind but a cancel or a breakerd denial counts, and so does a 5xx
 * or a 408; a call that raised nothing and got no 4xx or 5xx resets the
 * count; everything else (a 4xx, a 429, a cancel) leaves it as it is.
 */
export function localEffect(ev: Evidence): LocalEffect {
  const k = ev.error_kind;
  if (k === "ERROR_KIND_CANCELLED" || k === "ERROR_KIND_BREAKERD_DENIAL") return "none";
  if (k) return "count";
  const s = ev.http_status ?? 0;
  if (s >= 500 || s === 408) return "count";
  if (s >= 400) return "none";
  return "reset";
}

interface Local {
  failures: number;
  openUntil: number; // 0: closed
  probeUntil: number; // a probe holds the slot until then; 0: none
  last: string;
}

/** LocalBreaker is the fallback over the breakers this worker calls. */
export class LocalBreaker {
  private readonly table = new Map<string, Local>();

  constructor(
    private readonly clock: () => number,
    private readonly policyOf: (breaker: string) => LocalPolicy,
  ) {}

  /** allow decides one call. */
  allow(breaker: string): LocalVerdict {
    const b = this.table.get(breaker);
    const now = this.clock();
    if (!b || b.openUntil === 0) return { allowed: true, probe: false };
    if (now < b.openUntil) {
      return { allowed: false, probeInFlight: false, retryAfterMs: b.openUntil - now, reason: this.reason(breaker, b) };
    }
    if (b.probeUntil > now) {
      return {
        allowed: false,
        probeInFlight: true,
        retryAfterMs: b.probeUntil - now,
        reason: `${breaker} is being probed after ${b.failures} consecutive failures (local breaker: breakerd unreachable)`,
      };
    }
    b.probeUntil = now + this.policyOf(breaker).probeTimeoutMs;
    return { allowed: true, probe: true };
  }

  /** peek is the verdict allow would give, without taking the probe slot; undefined when it allows. */
  peek(breaker: string): Extract<LocalVerdict, { allowed: false }> | undefined {
    const b = this.table.get(breaker);
    const now = this.clock();
    if (!b || b.openUntil === 0) return undefined;
    if (now < b.openUntil) {
      return { allowed: false, probeInFlight: false, retryAfterMs: b.openUntil - now, reason: this.reason(breaker, b) };
    }
    return undefined; // a probe is due, or one is in flight and the next Allow will say so
  }

  /** record applies one call's evidence; probe says the call was the local probe. */
  record(breaker: string, ev: Evidence, probe: boolean): void {
    const effect = localEffect(ev);
    const now = this.clock();
    let b = this.table.get(breaker);
    if (effect === "none") {
      if (probe && b) b.probeUntil = 0; // a cancelled probe frees the slot
      return;
    }
    if (effect === "reset") {
      if (!b || b.openUntil === 0 || probe) this.table.delete(breaker);
      return;
    }
    if (!b) {
      b = { failures: 0, openUntil: 0, probeUntil: 0, last: "" };
      this.table.set(breaker, b);
    }
    b.failures++;
    b.last = describe(ev);
    const p = this.policyOf(breaker);
    if (probe || (b.openUntil === 0 && b.failures >= p.threshold)) {
      b.openUntil = now + p.cooldownBaseMs;
      b.probeUntil = 0;
    }
  }

  /** reset forgets every local verdict: breakerd answers again. */
  reset(): void {
    this.table.clear();
  }

  private reason(breaker: string, b: Local): string {
    return `${breaker} failing: ${b.failures} consecutive failures, last: ${b.last} (local breaker: breakerd unreachable)`;
  }
}

function describe(ev: Evidence): string {
  if (ev.error_kind) return ev.error_kind.replace("ERROR_KIND_", "").toLowerCase().replace(/_/g, " ");
  return `HTTP ${ev.http_status ?? 0}`;
}
