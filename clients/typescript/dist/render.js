// What a model reads: a denial's tool result and a run's notice, rendered
// from conformance/templates (the same bytes breakerd and every other
// client render from; src/templates.ts is generated from them). breakerd
// renders the tool result of every denial it answers; this client renders
// only the fallback's and a run's notice. The template syntax (a small
// subset of Mustache) is conformance/README.md's "Templates".
import { NOTICE_TEMPLATE, TOOL_RESULT_TEMPLATE } from "./templates.js";
const TAG = /\{\{([#^/]?)([a-z_]+)(\|json|\|join)?\}\}/y;
/** parse reads a template into nodes; a malformed tag is an error, never text. */
export function parse(src) {
    const stack = [{ name: "", inverted: false, body: [] }];
    let i = 0;
    while (i < src.length) {
        const open = src.indexOf("{{", i);
        const top = stack[stack.length - 1];
        if (open < 0) {
            top.body.push({ kind: "text", text: src.slice(i) });
            break;
        }
        if (open > i)
            top.body.push({ kind: "text", text: src.slice(i, open) });
        TAG.lastIndex = open;
        const m = TAG.exec(src);
        if (!m)
            throw new Error(`template: bad tag at byte ${open}: ${JSON.stringify(src.slice(open, open + 24))}`);
        const [whole, sigil, name, filter] = m;
        if (sigil === "#" || sigil === "^") {
            if (filter)
                throw new Error(`template: a section takes no filter: ${whole}`);
            stack.push({ name, inverted: sigil === "^", body: [] });
        }
        else if (sigil === "/") {
            const sec = stack.pop();
            if (!sec || stack.length === 0 || sec.name !== name)
                throw new Error(`template: ${whole} closes no open section`);
            stack[stack.length - 1].body.push({ kind: "section", name, inverted: sec.inverted, body: sec.body });
        }
        else {
            top.body.push({ kind: "var", name, filter: (filter?.slice(1) ?? "") });
        }
        i = open + whole.length;
    }
    if (stack.length !== 1)
        throw new Error(`template: section ${stack[stack.length - 1].name} is not closed`);
    return stack[0].body;
}
/** isSet: a value is set unless absent, false, 0, "" or an empty list. */
function isSet(v) {
    if (Array.isArray(v))
        return v.length > 0;
    return v !== undefined && v !== false && v !== 0 && v !== "";
}
/** lookup finds name in the innermost scope that has it. */
function lookup(scopes, name) {
    for (let i = scopes.length - 1; i >= 0; i--) {
        if (Object.prototype.hasOwnProperty.call(scopes[i], name))
            return scopes[i][name];
    }
    return undefined;
}
/** jsonString escapes a string exactly as conformance/README.md says. */
export function jsonString(s) {
    let out = '"';
    for (const ch of s) {
        const c = ch.codePointAt(0);
        if (ch === '"')
            out += '\\"';
        else if (ch === "\\")
            out += "\\\\";
        else if (ch === "\n")
            out += "\\n";
        else if (ch === "\r")
            out += "\\r";
        else if (ch === "\t")
            out += "\\t";
        else if (c < 0x20 || c === 0x7f)
            out += "\\u00" + c.toString(16).padStart(2, "0");
        else
            out += ch;
    }
    return out + '"';
}
function scalar(v) {
    if (v === undefined)
        return "";
    if (typeof v === "boolean")
        return v ? "true" : "false";
    if (typeof v === "number")
        return String(Math.trunc(v));
    if (typeof v === "string")
        return v;
    return v.map(String).join(", ");
}
function json(v) {
    if (typeof v === "string")
        return jsonString(v);
    if (Array.isArray(v))
        return "[" + v.map(jsonString).join(",") + "]";
    return scalar(v);
}
function renderNodes(nodes, scopes) {
    let out = "";
    for (const n of nodes) {
        if (n.kind === "text") {
            out += n.text;
        }
        else if (n.kind === "var") {
            const v = lookup(scopes, n.name);
            out += n.filter === "json" ? json(v) : n.filter === "join" ? (Array.isArray(v) ? v.join(", ") : scalar(v)) : scalar(v);
        }
        else {
            const v = lookup(scopes, n.name);
            if (n.inverted) {
                if (!isSet(v))
                    out += renderNodes(n.body, scopes);
            }
            else if (Array.isArray(v) && v.length > 0 && typeof v[0] === "object") {
                for (const item of v)
                    out += renderNodes(n.body, [...scopes, item]);
            }
            else if (isSet(v)) {
                out += renderNodes(n.body, scopes);
            }
        }
    }
    return out;
}
/** render renders template src over input (README's rule: one final newline of the file is not part of it). */
export function render(src, input) {
    return renderNodes(parse(src.endsWith("\n") ? src.slice(0, -1) : src), [input]);
}
/** renderToolResult renders the circuit_open JSON a model receives for a denial. */
export function renderToolResult(d) {
    return render(TOOL_RESULT_TEMPLATE, {
        status: d.probeInFlight ? "probe_in_flight" : "circuit_open",
        tool: d.tool,
        breaker: d.breaker,
        reason: d.reason,
        retry_after_ms: Math.max(0, Math.round(d.retryAfterMs)),
        alternatives: d.alternatives,
        forced: d.forced,
        degraded: d.degraded,
        scope: d.scope,
    });
}
/** about renders a wait of ms (≥ 1000) as conformance/README.md's about(): "1h5m", "2m30s", "45s". */
export function about(ms) {
    let s = Math.floor((ms + 500) / 1000);
    if (s >= 3600)
        s = Math.floor((s + 30) / 60) * 60;
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    return (h ? `${h}h` : "") + (m ? `${m}m` : "") + (sec ? `${sec}s` : "");
}
/** noticeScope adds the derived fields of one denial (README's table), then the template does the rest. */
function noticeScope(u, now) {
    const testing = u.status === "probe_in_flight";
    const backIn = !testing && u.mayReturnAtMs > 0 ? about(Math.max(u.mayReturnAtMs - now, 1000)) : "";
    return {
        tool: u.tool,
        status: u.status,
        reason: u.reason.replace(/[. ]+$/, ""),
        forced: u.forced,
        degraded: u.degraded,
        scope: u.scope,
        alternatives: u.alternatives,
        may_return_at_ms: u.mayReturnAtMs,
        subject: u.scope || "It",
        object: u.scope || "it",
        testing,
        back_in: backIn,
        forced_no_end: !testing && backIn === "" && u.forced,
        no_end: !testing && backIn === "" && !u.forced,
    };
}
/** renderNotice renders the run notice over the tools a run lost, at `now` (ms); "" when none. */
export function renderNotice(lost, now) {
    if (lost.length === 0)
        return "";
    return render(NOTICE_TEMPLATE, { denials: lost.map((u) => noticeScope(u, now)), now_ms: now });
}
