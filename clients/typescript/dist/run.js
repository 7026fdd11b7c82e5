// A run: one agent task. The tools it lost stay lost for the run, even if
// their circuits close mid-run, because the model's plan has already been
// rebuilt around their absence.
import { Client, denialError } from "./client.js";
import { fromEnvironment } from "./env.js";
import { toolRemoved } from "./otel.js";
import { denialOfState, retryAfterOf, storeDenial } from "./denial.js";
import { CircuitOpenError } from "./errors.js";
import { renderNotice, renderToolResult } from "./render.js";
/** breakerOf is the breaker a tool's calls go through. */
export function breakerOf(t) {
    return t.breaker || t.name;
}
const shared = new Map();
/**
 * sharedClient is the process's one Client for these options (the
 * environment's when they name no URL or token), made on first use and
 * kept: a run per task must not make a client per task (each keeps its
 * savings timer and its view of the daemons).
 */
function sharedClient(o) {
    const { urls, token } = fromEnvironment(o.urls, o.token);
    const key = JSON.stringify([urls, token ?? "", o.workerId]);
    let c = shared.get(key);
    if (!c) {
        c = new Client({ urls, token: token ?? "", workerId: o.workerId });
        shared.set(key, c);
    }
    return c;
}
/**
 * Run scopes one agent run on a Client: available() filters a toolset,
 * guard() runs a tool's call, notice() is what to tell the model, and
 * degraded what the run's result must carry. Removals are sticky.
 */
export class Run {
    clock;
    removed = new Map();
    tools = [];
    client;
    /**
     * A run on client, or on the process's one Client for { workerId, urls,
     * token } (made on first use; any other option wants a Client of your
     * own).
     */
    constructor(client, clock = Date.now) {
        this.clock = clock;
        this.client = client instanceof Client ? client : sharedClient(client);
    }
    /**
     * available returns the tools, in order, whose breakers breakerd does
     * not deny this worker now (each state's denial, one BatchGet within
     * the Allow budget), and removes the others from the run for good.
     * When no daemon answers, the client's fallback judges and removals are
     * marked degraded. The run keeps every tool it was asked about (the
     * latest ref of each name), for guard's removal of a breaker's tools.
     */
    async available(tools, opts = {}) {
        this.tools = [...this.tools.filter((k) => !tools.some((t) => t.name === k.name)), ...tools];
        const names = [...new Set(tools.filter((t) => !this.removed.has(t.name)).map(breakerOf))];
        const states = await this.client.states(names, opts);
        const now = this.clock();
        const verdicts = new Map();
        if (states) {
            for (const st of states) {
                const denial = denialOfState(st, this.client.workerId, now);
                const breaker = st.breaker ?? "";
                if (!denial)
                    continue;
                const scope = denial.scope === "parent" ? (st.parent ?? "") : "";
                verdicts.set(breaker, { breaker, scope, denial, alternatives: [...(st.alternatives ?? [])], degraded: false });
            }
        }
        else {
            for (const n of names) {
                const p = this.client.fallbackVerdict(n, n);
                if (p?.denial)
                    verdicts.set(n, { breaker: n, scope: p.scope, denial: p.denial, alternatives: p.alternatives, degraded: true });
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
    /**
     * guard runs fn as a call of tool (Client.guard with the tool's name). A
     * tool already removed throws its CircuitOpenError without a round trip;
     * a denial removes the tool, and every tool the run was asked about
     * that shares its breaker, for the rest of the run.
     */
    async guard(tool, fn, opts = {}) {
        const gone = this.removed.get(tool.name);
        if (gone)
            throw errorOf(gone, this.clock());
        const p = await this.client.allow(breakerOf(tool), { ...opts, tool: tool.name });
        if (p.allowed)
            return this.client.runWith(p, fn, opts);
        const err = denialError(p);
        const u = {
            tool: tool.name,
            breaker: p.breaker,
            scope: p.scope,
            denial: p.denial ?? storeDenial({ decision: p.decision, reason: p.reason }, 0, 0),
            removedAtMs: this.clock(),
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
    /** excludes is Client.excludes: err is not the dependency's fault (exclude, then the client's option). */
    excludes(err, exclude) {
        return this.client.excludes(err, exclude);
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
        toolRemoved(u);
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
/** errorOf is the denial a removed tool answers with for the rest of the run: the stored denial, rendered now. */
function errorOf(u, now) {
    const d = u.denial;
    const toolResult = renderToolResult(u, now);
    return new CircuitOpenError({
        breaker: u.breaker,
        tool: u.tool,
        decision: d.decision,
        reason: d.reason,
        retryAfterMs: retryAfterOf(d, now),
        alternatives: u.alternatives,
        scope: u.scope,
        forced: d.forced,
        degraded: u.degraded,
        toolResult,
        denial: d,
    });
}
