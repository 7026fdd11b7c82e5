// What a model reads: a denial's tool result and a run's notice.
// breakerd renders the tool result of every denial it answers; this
// client renders only the fallback's (no daemon answered) and the run
// notice, from the same templates, so the words are byte-identical.

/** DenialFields are the inputs of the tool-result template. */
export interface DenialFields {
  tool: string;
  breaker: string;
  reason: string;
  retryAfterMs: number;
  alternatives: string[];
  scope: string;
  forced: boolean;
  degraded: boolean;
  probeInFlight: boolean;
}

/** renderToolResult renders the circuit_open JSON a model receives for a denial. */
export function renderToolResult(d: DenialFields): string {
  const o: Record<string, unknown> = {
    status: d.probeInFlight ? "probe_in_flight" : "circuit_open",
    tool: d.tool,
    breaker: d.breaker,
    reason: d.reason,
    retry_after_ms: Math.max(0, Math.round(d.retryAfterMs)),
    alternatives: d.alternatives,
  };
  if (d.forced) o["forced"] = true;
  if (d.degraded) o["degraded"] = true;
  if (d.scope) o["scope"] = d.scope;
  return JSON.stringify(o);
}

/** NoticeEntry is one tool a run lost, as the notice template reads it. */
export interface NoticeEntry {
  tool: string;
  scope: string;
  status: "circuit_open" | "probe_in_flight";
  reason: string;
  forced: boolean;
  mayReturnAtMs: number;
  alternatives: string[];
  degraded: boolean;
}

/** renderNotice renders the run notice over the tools a run lost, at `now`; "" when none. */
export function renderNotice(lost: readonly NoticeEntry[], now: number): string {
  if (lost.length === 0) return "";
  let b = "Some tools are out of service and have been removed from your tools for the rest of this task:\n";
  for (const u of lost) {
    const it = u.scope || "It";
    const reason = u.reason.replace(/[. ]+$/, "");
    b += u.scope
      ? `- ${u.tool}: ${u.scope}, the service it depends on (its parent scope), is out of service: ${reason}.`
      : `- ${u.tool}: ${reason}.`;
    if (u.status === "probe_in_flight") {
      b += ` ${it} is being tested after an outage; its recovery is not confirmed, so it will not come back during this task.`;
    } else if (u.mayReturnAtMs > 0) {
      b += ` ${it} may be back in about ${Math.max(1, Math.round((u.mayReturnAtMs - now) / 1000))}s, but not during this task.`;
    } else if (u.forced) {
      b += ` An operator took ${u.scope || "it"} out of service; no return time is known.`;
    } else {
      b += " No return time is known.";
    }
    if (u.degraded) b += " (Judged by this worker alone: the breaker service is unreachable.)";
    if (u.alternatives.length > 0) b += ` Instead you can use: ${u.alternatives.join(", ")}.`;
    b += "\n";
  }
  return (
    b +
    "Continue the task with the tools you still have; do not try to call the removed ones. " +
    "In your final answer, say which parts of the task could not be done because of them."
  );
}
