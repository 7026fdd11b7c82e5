// A run: one agent task. The tools it lost stay lost for the run, even if
// their circuits close mid-run, because the model's plan has already been
// rebuilt around their absence.
import { denialError } from "./client.js";
import { CircuitOpenError } from "./errors.js";
import { renderNotice, renderToolResult } from "./render.js";
import { int64 } from "./wire.js";
/** breakerOf is the breaker a tool's calls go through. */
export function breakerOf(t) {
    return t.breaker || t.name;
}
/** The largest int64: deny_until_ms's "until an operator acts". */
const FOREVER = "9223372036854775807";
/**
 * Run scopes one agent run on a Client: available() filters a toolset,
 * guard() runs a tool's call, notice() is what to tell the model, and
 * degraded what the run's result must carry. Removals are sticky.
 */
export class Run {
    client;
    clock;
    removed = new Map();
    tools = [];
    constructor(client, clock = Date.now) {
        this.client = client;
        this.clock = clock;
    }
    /**
     * available returns the tools, in order, whose breakers breakerd does
     * not deny now (deny_until_ms, one BatchGet within the Allow budget),
     * and removes the others from the run for good. When no daemon answers,
     * the client's fallback judges and removals are marked degraded.
     */
    async available(tools, opts = {}) {
        this.tools = [...tools];
        const names = [...new Set(tools.filter((t) => !this.removed.has(t.name)).map(breakerOf))];
        const states = await this.client.states(names, opts);
        const now = this.clock();
        const verdicts = new Map();
        if (states) {
            const byName = new Map(states.map((s) => [s.breaker ?? "", s]));
            const parents = await this.parentsOf(states, byName, opts);
            for (const n of names)
                verdicts.set(n, judge(n, byName.get(n), parents, now));
        }
        else {
            for (const n of names) {
                const p = this.client.fallbackVerdict(n, n);
                verdicts.set(n, p && {
                    breaker: n,
                    scope: p.scope,
                    status: p.decision === "DECISION_DENIED_PROBE_IN_FLIGHT" ? "probe_in_flight" : "circuit_open",
                    reason: p.reason,
                    forced: p.decision === "DECISION_DENIED_FORCED_OPEN",
                    mayReturnAtMs: p.retryAfterMs > 0 ? now + p.retryAfterMs : 0,
                    alternatives: p.alternatives,
                    degraded: true,
                });
            }
        }
        const out = [];
        for (const t of tools) {
            if (this.removed.has(t.name))
                continue;
            const v = verdicts.get(breakerOf(t));
            if (v)
                this.remove({ ...v, tool: t.name, removedAtMs: now });
            else
                out.push(t);
        }
        return out;
    }
    /** parentsOf reads the parents of the breakers their parent denies (a second BatchGet, only then). */
    async parentsOf(states, byName, opts) {
        const want = new Set();
        for (const st of states) {
            if (deniedByParent(st) && !byName.has(st.parent))
                want.add(st.parent);
        }
        const out = new Map(byName);
        if (want.size === 0)
            return out;
        for (const st of (await this.client.states([...want], opts)) ?? [])
            out.set(st.breaker ?? "", st);
        return out;
    }
    /**
     * guard runs fn as a call of tool (Client.guard with the tool's name). A
     * tool already removed throws its CircuitOpenError without a round trip;
     * a denial removes the tool, and every tool of the last toolset that
     * shares its breaker, for the rest of the run.
     */
    async guard(tool, fn, opts = {}) {
        const gone = this.removed.get(tool.name);
        if (gone)
            throw errorOf(gone, this.clock());
        const p = await this.client.allow(breakerOf(tool), { ...opts, tool: tool.name });
        if (p.allowed)
            return this.client.runWith(p, fn, opts);
        const err = denialError(p);
        const now = this.clock();
        const u = {
            tool: tool.name,
            breaker: p.breaker,
            scope: p.scope,
            status: p.decision === "DECISION_DENIED_PROBE_IN_FLIGHT" ? "probe_in_flight" : "circuit_open",
            reason: p.reason,
            forced: err.forced,
            removedAtMs: now,
            mayReturnAtMs: p.retryAfterMs > 0 ? now + p.retryAfterMs : 0,
            alternatives: p.alternatives,
            degraded: p.degraded,
        };
        this.remove(u);
        for (const t of this.tools) {
            if (t.name !== tool.name && breakerOf(t) === breakerOf(tool))
                this.remove({ ...u, tool: t.name });
        }
        throw err;
    }
    /**
     * remove takes a tool out of the run, once: each removal is one tool a
     * run left out, counted under the breaker that decided (the parent
     * scope when it did) in the client's savings report.
     */
    remove(u) {
        if (this.removed.has(u.tool))
            return;
        this.removed.set(u.tool, u);
        this.client.savings.add(u.scope || u.breaker, 0, 1);
    }
    /** degraded is every tool the run lost, in the order they were removed. */
    get degraded() {
        return [...this.removed.values()].map((u) => ({ ...u, alternatives: [...u.alternatives] }));
    }
    /** notice is the text to give the model about the tools the run lost; "" when none. */
    notice() {
        return renderNotice(this.degraded, this.clock());
    }
}
/** deniedByParent: a breaker whose own state does not deny, denied all the same (its parent's verdict). */
function deniedByParent(st) {
    return !!st.parent && denies(st) && (!st.state || st.state === "STATE_CLOSED");
}
function denies(st) {
    if (!st)
        return false;
    return st.deny_until_ms === FOREVER || int64(st.deny_until_ms) > int64(st.as_of_ms);
}
/** judge reads breakerd's verdict on breaker n (deny_until_ms); undefined when it does not deny. */
function judge(n, st, all, now) {
    if (!st || !denies(st))
        return undefined;
    const byParent = deniedByParent(st);
    const decider = byParent ? (all.get(st.parent) ?? st) : st;
    const mayReturnAtMs = st.deny_until_ms === FOREVER ? 0 : now + (int64(st.deny_until_ms) - int64(st.as_of_ms));
    const probing = decider.state === "STATE_HALF_OPEN";
    let reason = decider.reason ?? "";
    if (probing)
        reason = `${decider.breaker} is recovering from an outage and is being probed` + (decider.last_failure ? ` (last failure: ${decider.last_failure})` : "");
    return {
        breaker: n,
        scope: byParent ? st.parent : "",
        status: probing ? "probe_in_flight" : "circuit_open",
        reason,
        forced: decider.state === "STATE_FORCED_OPEN" && !!decider.forced_by,
        mayReturnAtMs,
        alternatives: [...(st.alternatives ?? [])],
        degraded: false,
    };
}
/** errorOf is the denial a removed tool answers with for the rest of the run. */
function errorOf(u, now) {
    const retryAfterMs = u.mayReturnAtMs > 0 ? Math.max(0, u.mayReturnAtMs - now) : 0;
    const decision = u.scope
        ? "DECISION_DENIED_PARENT_OPEN"
        : u.status === "probe_in_flight"
            ? "DECISION_DENIED_PROBE_IN_FLIGHT"
            : u.forced
                ? "DECISION_DENIED_FORCED_OPEN"
                : "DECISION_DENIED_OPEN";
    const toolResult = renderToolResult({ ...u, retryAfterMs, probeInFlight: u.status === "probe_in_flight" });
    return new CircuitOpenError({ ...u, decision, retryAfterMs, toolResult });
}
