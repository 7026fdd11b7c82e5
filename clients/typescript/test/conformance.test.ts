// conformance/ at the repository root, run here: the templates and the
// fallback's words this package carries are the files' bytes, every
// render case renders byte for byte, the fallback's cases decide as Go's
// fallback does, the classification rows are evidence this client's
// error mapping builds (and whose effect on the fallback agrees with the
// row's outcome), and client_rules.json holds the fallback's defaults,
// the headers sent and what the fallback counts.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import OpenAI from "openai";

import {
  CircuitOpenError,
  LocalBreaker,
  MalformedOutputError,
  effectOfOutcome,
  evidenceOfError,
  evidenceOfResponse,
  DEFAULT_LOCAL_POLICY,
  WAIT_HEADERS,
  fallbackDenial,
  inputOf,
  type FallbackKind,
  localEffect,
  render,
  renderNoticeInputs,
  renderToolFailure,
  renderToolResultInput,
  type Evidence,
  type TemplateInput,
} from "../src/index.js";
import { FALLBACK_DENIALS, NOTICE_TEMPLATE, TOOL_FAILURE_TEMPLATE, TOOL_RESULT_TEMPLATE } from "../src/templates.js";
import { Clock, conformanceDir } from "./helpers.js";

const dir = conformanceDir();
const load = <T>(name: string): T => JSON.parse(readFileSync(join(dir, name), "utf8")) as T;

test("the templates and fallback words this package carries are conformance's (npm run gen-templates)", () => {
  assert.equal(TOOL_RESULT_TEMPLATE, readFileSync(join(dir, "templates", "tool_result.tmpl"), "utf8"));
  assert.equal(NOTICE_TEMPLATE, readFileSync(join(dir, "templates", "notice.tmpl"), "utf8"));
  assert.equal(TOOL_FAILURE_TEMPLATE, readFileSync(join(dir, "templates", "tool_failure.tmpl"), "utf8"));
  const words = load<Record<string, { status: string; reason: string }>>("fallback_denials.json");
  assert.deepEqual(Object.keys(FALLBACK_DENIALS).sort(), Object.keys(words).sort(), "the fallback's denial kinds");
  for (const [kind, w] of Object.entries(FALLBACK_DENIALS)) {
    assert.deepEqual({ status: w.status, reason: w.reason }, { status: words[kind]?.status, reason: words[kind]?.reason }, kind);
  }
});

interface RenderCase {
  name: string;
  template: "tool_result" | "notice" | "tool_failure";
  /** A case of the local fallback's own denial: open or probe_in_flight. */
  fallback?: FallbackKind;
  input: Record<string, unknown>;
  now_ms: number;
  want: string;
}

test("render.json: every case renders byte for byte", () => {
  const { cases } = load<{ cases: RenderCase[] }>("render.json");
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const got =
      c.template === "tool_result"
        ? renderToolResultInput(c.input as unknown as TemplateInput, c.now_ms)
        : c.template === "tool_failure"
          ? renderToolFailure(c.input["tool"] as string)
          : renderNoticeInputs(c.input["denials"] as TemplateInput[], c.now_ms);
    assert.equal(got, c.want, c.name);
  }
});

test("render.json: the fallback's cases are the inputs this client's fallback builds", () => {
  const cases = load<{ cases: RenderCase[] }>("render.json").cases.filter((c) => c.fallback);
  assert.deepEqual([...new Set(cases.map((c) => c.fallback))].sort(), ["open", "probe_in_flight"]);
  for (const c of cases) {
    const inputs = c.template === "notice" ? (c.input["denials"] as TemplateInput[]) : [c.input as unknown as TemplateInput];
    for (const { now_ms: _clock, ...want } of inputs as (TemplateInput & { now_ms?: number })[]) {
      const waitMs = want.may_return_at_ms > 0 ? want.may_return_at_ms - c.now_ms : 0;
      const denial = fallbackDenial(c.fallback!, waitMs, c.now_ms);
      assert.deepEqual(inputOf({ tool: want.tool, denial, alternatives: want.alternatives, degraded: true }), want, c.name);
    }
  }
});

test("a malformed template tag is an error, never text", () => {
  for (const bad of ["{{ tool }}", "{{Tool}}", "{{#a}}x", "{{/a}}", "{{tool|upper}}", "{{#a}}{{/b}}"]) {
    assert.throws(() => render(bad, {}), /template:/, bad);
  }
});

interface FallbackCase {
  name: string;
  policy: { threshold: number; cooldown_base_ms: number; cooldown_cap_ms: number; probe_timeout_ms: number };
  steps: { at_ms: number; op: "allow" | "record"; outcome?: string; want?: { decision: string; retry_after_ms: number } }[];
}

test("fallback.json: the local breaker decides as Go's fallback", () => {
  const { cases } = load<{ cases: FallbackCase[] }>("fallback.json");
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const clock = new Clock(0);
    const p = c.policy;
    const lb = new LocalBreaker(clock.now, () => ({
      threshold: p.threshold,
      cooldownBaseMs: p.cooldown_base_ms,
      cooldownCapMs: p.cooldown_cap_ms,
      probeTimeoutMs: p.probe_timeout_ms,
    }));
    let probe = false;
    c.steps.forEach((s, i) => {
      clock.ms = s.at_ms;
      if (s.op === "record") {
        lb.record("b", effectOfOutcome(s.outcome!), probe);
        return;
      }
      const v = lb.allow("b");
      const got = v.allowed
        ? { decision: v.probe ? "DECISION_PROBE" : "DECISION_ALLOWED", retry_after_ms: 0 }
        : { decision: v.probeInFlight ? "DECISION_DENIED_PROBE_IN_FLIGHT" : "DECISION_DENIED_OPEN", retry_after_ms: v.retryAfterMs };
      if (v.allowed) probe = v.probe;
      assert.deepEqual(got, s.want, `${c.name}: step ${i} (allow at ${s.at_ms})`);
    });
  }
});

interface Row {
  name: string;
  evidence: Evidence & { grpc_status?: number };
  deadline_ms?: number;
  count_unrecognised?: boolean;
  want: { outcome: string; counts: boolean };
}

const rows = () => load<{ rows: Row[] }>("classification.json").rows;

test("classification.json: the fallback's reading of evidence agrees with every row's outcome", () => {
  let n = 0;
  for (const r of rows()) {
    if ("grpc_status" in r.evidence || "grpc_retry_delay_ms" in r.evidence) continue; // this client sends no gRPC evidence
    if (r.want.outcome === "OUTCOME_RATE_LIMITED" || r.count_unrecognised) continue; // outside the subset, but for client_rules.json's rows (below)
    assert.equal(localEffect(r.evidence), effectOfOutcome(r.want.outcome), r.name);
    n++;
  }
  assert.ok(n > 30, `only ${n} rows`);
});

/** A JavaScript failure for each error kind, as the libraries raise it (or as Node does, for DNS). */
function errorOfKind(kind: string): unknown {
  const sys = (code: string) => new TypeError("fetch failed", { cause: Object.assign(new Error(code), { code }) });
  const abort = new AbortController();
  abort.abort();
  const denial = new CircuitOpenError({
    breaker: "inner", tool: "inner", decision: "DECISION_DENIED_OPEN", reason: "", retryAfterMs: 0, alternatives: [], scope: "",
    forced: false, degraded: false, toolResult: "",
  });
  const byKind: Record<string, unknown> = {
    ERROR_KIND_DNS: sys("ENOTFOUND"),
    ERROR_KIND_TLS: sys("CERT_HAS_EXPIRED"),
    ERROR_KIND_REFUSED: sys("ECONNREFUSED"),
    ERROR_KIND_RESET: new TypeError("terminated", { cause: Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" }) }),
    ERROR_KIND_TIMEOUT: new DOMException("The operation was aborted due to timeout", "TimeoutError"),
    ERROR_KIND_CANCELLED: abort.signal.reason,
    ERROR_KIND_MALFORMED_OUTPUT: new MalformedOutputError("missing field id"),
    ERROR_KIND_BREAKERD_DENIAL: denial,
    ERROR_KIND_OTHER: new RangeError("a bug in the tool"),
  };
  return byKind[kind];
}

test("classification.json: this client builds each row's evidence from a JavaScript failure", () => {
  const skipped: string[] = [];
  let n = 0;
  for (const r of rows()) {
    const ev = r.evidence;
    const keys = Object.keys(ev);
    let got: Evidence | undefined;
    if (keys.length === 1 && ev.error_kind) {
      got = evidenceOfError(errorOfKind(ev.error_kind));
    } else if (ev.http_status && !ev.error_kind && !ev.no_deadline && !("grpc_status" in ev) && !("date" in (ev.headers ?? {}))) {
      const headers = new Headers(ev.headers ?? {});
      if (ev.date) headers.set("date", ev.date);
      if (ev.body_error_code) {
        // The OpenAI SDK's own error for such an answer.
        got = evidenceOfError(OpenAI.APIError.generate(ev.http_status, { error: { code: ev.body_error_code } }, "m", headers));
      } else {
        got = evidenceOfResponse(new Response(null, { status: ev.http_status === 304 ? 200 : ev.http_status, headers }));
        if (ev.http_status === 304) got.http_status = 304; // a Response cannot be built with 304 and a body slot; the status is read the same
      }
      if (ev.headers && Object.keys(ev.headers).some((h) => !rules().wait_headers.includes(h))) {
        // A header no client sends (x-request-id): the row is the daemon's (it ignores it).
        got = undefined;
      }
    }
    if (!got) {
      if (keys.length === 0) continue; // a success: guard records {} for a value that is not a failed Response
      skipped.push(r.name);
      continue;
    }
    assert.deepEqual(got, ev, r.name);
    n++;
  }
  assert.ok(n >= 40, `only ${n} rows built; skipped ${skipped.join("; ")}`);
});

interface ClientRules {
  defaults: { threshold: number; cooldown_base_ms: number; cooldown_cap_ms: number; probe_timeout_ms: number };
  wait_headers: string[];
  wait_header_prefixes: string[];
  fallback_counts: string[];
}

const rules = () => load<ClientRules>("client_rules.json");

test("client_rules.json: the fallback's defaults are the daemon's default policy's", () => {
  const d = rules().defaults;
  assert.deepEqual(DEFAULT_LOCAL_POLICY, {
    threshold: d.threshold,
    cooldownBaseMs: d.cooldown_base_ms,
    cooldownCapMs: d.cooldown_cap_ms,
    probeTimeoutMs: d.probe_timeout_ms,
  });
});

test("client_rules.json: the headers sent as evidence are exactly the ones the daemon reads", () => {
  const r = rules();
  assert.deepEqual([...WAIT_HEADERS].sort(), [...r.wait_headers].sort());
  assert.deepEqual(r.wait_header_prefixes, [], "the daemon reads headers by prefix: this client copies none that way");
  // The wire: a Response carrying every wait header and others sends the wait headers only.
  const headers = new Headers({ "x-request-id": "r1", "set-cookie": "s=1", "x-ratelimit-remaining-requests": "0" });
  for (const h of r.wait_headers) headers.set(h, "7");
  const ev = evidenceOfResponse(new Response(null, { status: 429, headers }));
  assert.deepEqual(Object.keys(ev.headers ?? {}).sort(), [...r.wait_headers].sort());
});

test("client_rules.json: the local fallback counts each fallback_counts row as the daemon does", () => {
  const byName = new Map(rows().map((r) => [r.name, r]));
  const names = rules().fallback_counts;
  assert.ok(names.length > 0);
  for (const name of names) {
    const r = byName.get(name);
    assert.ok(r, `fallback_counts names ${JSON.stringify(name)}, which classification.json has no row of`);
    // Recorded threshold times, the local circuit opens if and only if the row counts.
    const lb = new LocalBreaker(new Clock(0).now, () => DEFAULT_LOCAL_POLICY);
    for (let i = 0; i < DEFAULT_LOCAL_POLICY.threshold; i++) lb.record("b", localEffect(r.evidence, r.deadline_ms ?? 0), false);
    assert.equal(lb.peek("b") !== undefined, r.want.counts, name);
  }
});
