// The minimal local fallback: what a worker does while no daemon answers
// within the Allow budget, for the breakers the open cache knows nothing
// of. It is the subset of the Go client's local breaker that
// conformance/fallback.json holds every client to: one worker (no
// quorum); consecutive counted failures up to the policy's threshold open
// the local circuit for the base cooldown; after it one local probe goes
// while every other call is denied; the probe's success closes the
// circuit, its failure opens it again for twice the previous cooldown, at
// most the cap. No rate-limit rule, no pause. Its defaults and which
// evidence it counts are conformance/client_rules.json's; its denials'
// words are conformance/fallback_denials.json's (render.ts).

import { int64, type Evidence, type Policy } from "./wire.js";

/** LocalPolicy is the fallback's policy of a breaker: breakerd's, from the client's first Allow of it (localPolicy). */
export interface LocalPolicy {
  /** Consecutive counted failures that open the local circuit. */
  threshold: number;
  /** The first open period, ms. */
  cooldownBaseMs: number;
  /** The longest open period, ms. */
  cooldownCapMs: number;
  /** How long a probe that never reports holds the one probe slot, ms. */
  probeTimeoutMs: number;
}

/** DEFAULT_LOCAL_POLICY is breakerd's default policy's values of these fields (conformance/client_rules.json's defaults). */
export const DEFAULT_LOCAL_POLICY: LocalPolicy = {
  threshold: 5,
  cooldownBaseMs: 30_000,
  cooldownCapMs: 900_000,
  probeTimeoutMs: 30_000,
};

/** localPolicy is the fallback's part of a breaker's effective policy; a field breakerd left out keeps its default. */
export function localPolicy(p: Policy): LocalPolicy {
  return {
    threshold: p.threshold || DEFAULT_LOCAL_POLICY.threshold,
    cooldownBaseMs: int64(p.cooldown_base_ms) || DEFAULT_LOCAL_POLICY.cooldownBaseMs,
    cooldownCapMs: int64(p.cooldown_cap_ms) || DEFAULT_LOCAL_POLICY.cooldownCapMs,
    probeTimeoutMs: int64(p.probe_timeout_ms) || DEFAULT_LOCAL_POLICY.probeTimeoutMs,
  };
}

/** LocalVerdict is the fallback's answer to one Allow. */
export type LocalVerdict =
  | { allowed: true; probe: boolean }
  | { allowed: false; probeInFlight: boolean; retryAfterMs: number };

/** What the fallback does with one outcome: count a failure, end a failure run, or nothing. */
export type LocalEffect = "count" | "success" | "none";

/** The outcomes of the subset, by what the fallback does with them. */
const OUTCOME_EFFECTS: Readonly<Record<string, LocalEffect>> = {
  OUTCOME_SUCCESS: "success",
  OUTCOME_TRANSPORT: "count",
  OUTCOME_TIMEOUT: "count",
  OUTCOME_SERVER_ERROR: "count",
  OUTCOME_MALFORMED_OUTPUT: "count",
};

/** effectOfOutcome is what the fallback does with an outcome (an Outcome enum name): outside the subset, nothing. */
export function effectOfOutcome(outcome: string): LocalEffect {
  return OUTCOME_EFFECTS[outcome] ?? "none";
}

/** The error kinds the fallback counts: the transport kinds, a timeout, malformed output. */
const COUNTED_KINDS: ReadonlySet<string> = new Set([
  "ERROR_KIND_DNS",
  "ERROR_KIND_TLS",
  "ERROR_KIND_REFUSED",
  "ERROR_KIND_RESET",
  "ERROR_KIND_TIMEOUT",
  "ERROR_KIND_MALFORMED_OUTPUT",
]);

/**
 * BARE_RATE_LIMIT_WAIT_MS is the daemon's default policy's
 * bare_rate_limit_wait (docs/policies.md): the wait a 429 that names none
 * is taken to ask for.
 */
const BARE_RATE_LIMIT_WAIT_MS = 60_000;

/**
 * localEffect is what the fallback does with a call's evidence, which no
 * daemon classified, for a caller with deadlineMs left: a transport error
 * kind, a timeout, malformed output, a 5xx or a 408 counts, and so does a
 * 429 that names no wait when the caller has a deadline the bare wait
 * passes; a call that raised nothing and got no status of 400 or more
 * ends a failure run; anything else (another 4xx, a rate limit naming its
 * wait, a cancel, a breakerd denial, an error no one can name) does
 * nothing. The tests hold it to conformance/client_rules.json's
 * fallback_counts rows and to every row of
 * conformance/classification.json whose outcome is in the subset.
 */
export function localEffect(ev: Evidence, deadlineMs = 0): LocalEffect {
  const k = ev.error_kind;
  if (k) return COUNTED_KINDS.has(k) ? "count" : "none";
  const s = ev.http_status ?? 0;
  if (s >= 500 || s === 408) return "count";
  if (s === 429 && Object.keys(ev.headers ?? {}).length === 0) {
    return !ev.no_deadline && BARE_RATE_LIMIT_WAIT_MS > deadlineMs ? "count" : "none";
  }
  if (s >= 400) return "none";
  return "success";
}

interface Local {
  failures: number;
  /** The current open period, ms; 0 while closed. */
  cooldownMs: number;
  /** When the current open period ends; 0 while closed. */
  openUntil: number;
  /** The one probe holds the slot until then; 0 when none. */
  probeUntil: number;
}

/** LocalBreaker is the fallback over the breakers this worker calls. */
export class LocalBreaker {
  private readonly table = new Map<string, Local>();

  constructor(
    private readonly clock: () => number,
    private readonly policyOf: (breaker: string) => LocalPolicy,
  ) {}

  /** allow decides one call; a probe it grants holds the slot until recorded or timed out. */
  allow(breaker: string): LocalVerdict {
    const v = this.peek(breaker);
    if (v) return v;
    const b = this.table.get(breaker);
    if (!b || b.openUntil === 0) return { allowed: true, probe: false };
    b.probeUntil = this.clock() + this.policyOf(breaker).probeTimeoutMs;
    return { allowed: true, probe: true };
  }

  /** peek is the denial allow would give, without taking the probe slot; undefined when allow would let a call go. */
  peek(breaker: string): Extract<LocalVerdict, { allowed: false }> | undefined {
    const b = this.table.get(breaker);
    const now = this.clock();
    if (!b || b.openUntil === 0) return undefined;
    if (now < b.openUntil) return { allowed: false, probeInFlight: false, retryAfterMs: b.openUntil - now };
    if (now < b.probeUntil) return { allowed: false, probeInFlight: true, retryAfterMs: b.probeUntil - now };
    return undefined;
  }

  /** record applies one call's effect; probe says the call was the local probe. */
  record(breaker: string, effect: LocalEffect, probe: boolean): void {
    const b = this.table.get(breaker);
    if (effect === "none") {
      if (probe && b) b.probeUntil = 0; // a cancelled probe frees the slot
      return;
    }
    if (effect === "success") {
      if (b && (probe || b.openUntil === 0)) this.table.delete(breaker);
      return;
    }
    const p = this.policyOf(breaker);
    const now = this.clock();
    const s = b ?? { failures: 0, cooldownMs: 0, openUntil: 0, probeUntil: 0 };
    this.table.set(breaker, s);
    s.failures++;
    if (probe && s.openUntil > 0) {
      s.cooldownMs = Math.min(2 * s.cooldownMs, p.cooldownCapMs);
      s.openUntil = now + s.cooldownMs;
      s.probeUntil = 0;
    } else if (s.openUntil === 0 && s.failures >= p.threshold) {
      s.cooldownMs = Math.min(p.cooldownBaseMs, p.cooldownCapMs);
      s.openUntil = now + s.cooldownMs;
    }
  }

  /**
   * holdOpen makes a closed breaker open with its probe due now (one call
   * goes, the rest are denied until its outcome): the daemons last said
   * it was open and none answers now.
   */
  holdOpen(breaker: string): void {
    if ((this.table.get(breaker)?.openUntil ?? 0) !== 0) return;
    const now = this.clock();
    const base = this.policyOf(breaker).cooldownBaseMs;
    this.table.set(breaker, { failures: 0, cooldownMs: base, openUntil: now, probeUntil: 0 });
  }

  /** reset forgets every local verdict: breakerd answers again. */
  reset(): void {
    if (this.table.size > 0) this.table.clear();
  }
}
