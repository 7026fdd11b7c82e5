// One transport: POST /breakerd.v1.BreakerService/<Method> with JSON, over
// the platform's fetch (keep-alive), to one of several daemon URLs. A
// daemon that cannot be reached, or that answers Unavailable, is skipped
// for the next one within the call's budget; every other answer (a
// refusal, a 401/403, a page that is not breakerd's JSON) is thrown at
// once, typed, and never taken for an outage. A daemon with a call
// outstanding longer than skipAfterMs (the Allow budget) is tried after
// the others. So is one that did not answer (refused, silent, or
// Unavailable), until it answers again: while another daemon answers, no
// call of a caller tries it; after its back-off (reach.ts backoffMs, on
// the back-off clock) a probe in the background asks it, and only a probe
// answered within skipAfterMs takes it back. A paused daemon costs at
// most the call that found it, and one back from a restart, cold, costs
// no call its budget.

import { inject } from "./otel.js";
import { APIError, AuthError, ConfigError, ProtocolError, UnreachableError } from "./errors.js";
import { typeOf } from "./check.js";
import { BodyTooLarge, offStop, onStop, type Ender, type Stop, type Unary, type UnaryAnswer } from "./unary.js";
import { backoffMs } from "./reach.js";
import type { ErrorBody } from "./wire.js";

/** The service path prefix of every unary method. */
export const SERVICE_PATH = "/breakerd.v1.BreakerService/";

/** MAX_BODY_BYTES bounds one answer's body: breakerd's largest (a BatchGet of 1,024 states) is well within it. */
export const MAX_BODY_BYTES = 4 << 20;

/** MAX_TARGETS bounds the method URLs a transport keeps made (a few methods on a few daemons). */
const MAX_TARGETS = 256;

/** Order is the daemons a call tries, in turn; the first `free` of them are not passed over. */
interface Order {
  readonly order: readonly number[];
  readonly free: number;
}

/** ONE is the order of a transport's one daemon. */
const ONE: Order = { order: [0], free: 1 };

/**
 * shares is how many ways the budget left is shared at the i-th daemon of
 * n tried, the first `free` of them free: among the free daemons left, so
 * that one passed over gets only what they leave (a slow daemon that
 * answers never hands half its budget to one that did not); then among
 * the passed over left.
 */
function shares(i: number, free: number, n: number): number {
  return i < free ? free - i : n - i;
}

/** The gRPC codes (by their JSON names) that mean "try another daemon". */
const REACH_CODES = new Set(["unavailable", "deadline_exceeded"]);

/** The gateway statuses a proxy answers for a daemon it cannot reach: with a body that is not breakerd's JSON error, that daemon is away. */
const GATEWAY = new Set([502, 503, 504]);

/** parseURLs checks the daemon URLs once: each must be an http(s) URL. */
export function parseURLs(urls: string | readonly string[]): URL[] {
  const list = typeof urls === "string" ? [urls] : [...urls];
  if (list.length === 0) throw new ConfigError("urls", "at least one breakerd URL is required");
  return list.map((u, i) => {
    const field = typeof urls === "string" ? "urls" : `urls[${i}]`;
    if (typeof u !== "string") throw new ConfigError(field, `must be a URL string, got ${typeOf(u)}`);
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw new ConfigError(field, `${JSON.stringify(u)} is not a URL (want http://host:port)`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new ConfigError(field, `${JSON.stringify(u)} is not an http or https URL`);
    }
    if (parsed.username || parsed.password) {
      throw new ConfigError(field, `${JSON.stringify(u)} carries credentials; pass the token option instead`);
    }
    if (parsed.search || parsed.hash) {
      throw new ConfigError(field, `${JSON.stringify(u)} has a query or fragment; give the base URL only`);
    }
    if (!parsed.pathname.endsWith("/")) parsed.pathname += "/";
    return parsed;
  });
}

export interface TransportOptions {
  urls: URL[];
  token?: string | undefined;
  fetch: typeof fetch;
  /** The unary calls' sender, when there is one beside fetch (keepalive.ts on Node); absent: fetch sends them. */
  unary?: Unary | undefined;
  /** A call outstanding this long at a daemon passes it over for the others, ms (the Allow budget); absent: never. */
  skipAfterMs?: number | undefined;
  /** The clock of the back-off of a daemon that did not answer, ms. Default Date.now. */
  clock?: (() => number) | undefined;
  /** The call that probes such a daemon. Default BatchGet of no breaker. */
  probe?: { method: string; body: unknown } | undefined;
  /** How long a probe may take, ms. Default 2000. */
  probeTimeoutMs?: number | undefined;
}

/** CallOptions bound one call: its budget, and the caller's own signal. */
export interface CallOptions {
  /** How long every attempt together may take, ms; 0 or absent: no bound but the signal. */
  budgetMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** A reach failure: the attempt says nothing about the request, another daemon may answer. */
class Unreached {
  constructor(readonly cause: unknown) {}
}

/** Transport sends unary calls with failover. Safe for concurrent use. */
export class Transport {
  private next = 0; // the daemon that answered last: tried first
  private readonly busy: number[][]; // when each outstanding call began, by daemon
  // A daemon that did not answer is tried last until a probe finds it
  // again: its failures in a row, and when it is probed next (on o.clock).
  private readonly strikes: number[];
  private readonly due: number[];
  private readonly probing: boolean[];
  /** Background probes sent (for tests). */
  probes = 0;
  /** Each daemon's method URLs, by "<daemon> <method>". */
  private readonly targets = new Map<string, URL>();

  constructor(private readonly o: TransportOptions) {
    this.busy = o.urls.map(() => []);
    this.strikes = o.urls.map(() => 0);
    this.due = o.urls.map(() => 0);
    this.probing = o.urls.map(() => false);
  }

  /** probesOut says whether a background probe is out (for tests). */
  get probesOut(): boolean {
    return this.probing.some((p) => p);
  }

  /** The daemon URLs, in the order configured. */
  get urls(): readonly URL[] {
    return this.o.urls;
  }

  /** headers are the request headers every call (and the watch stream) sends. */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (this.o.token) h["authorization"] = `Bearer ${this.o.token}`;
    inject(h); // the caller's traceparent, when the application uses OpenTelemetry
    return h;
  }

  /** fetch is the platform fetch this transport uses. */
  get fetch(): typeof fetch {
    return this.o.fetch;
  }

  /**
   * call posts body to method on one daemon after another (starting with
   * the last that answered) until one answers or the budget is spent.
   * Throws UnreachableError when none answered, the caller's abort reason
   * when its signal ended the call, and APIError/AuthError/ProtocolError
   * for an answer that refuses the request.
   */
  async call<T>(method: string, body: unknown, co: CallOptions = {}): Promise<T> {
    const payload = JSON.stringify(body);
    const budget = co.budgetMs && co.budgetMs > 0 ? timeout(Math.ceil(co.budgetMs)) : undefined;
    const signal = anySignal([co.signal, budget?.signal]);
    try {
      const causes: unknown[] = [];
      const n = this.o.urls.length;
      const first = this.next;
      const end = co.budgetMs && co.budgetMs > 0 ? Date.now() + co.budgetMs : 0;
      const { order, free } = n === 1 ? ONE : this.order(first);
      for (let i = 0; i < n; i++) {
        const idx = order[i] as number;
        const url = this.target(idx, method);
        // Each daemon left gets its share of the budget: a hung one must
        // not keep the call from the next.
        const ways = shares(i, free, n);
        const share = end && ways > 1 ? timeout(Math.max(1, Math.floor((end - Date.now()) / ways))) : undefined;
        const both = share ? anySignal([signal?.signal, share.signal]) : signal;
        const began = Date.now();
        const busy = this.busy[idx] as number[];
        busy.push(began);
        let got: unknown;
        try {
          got = await this.attempt(url, payload, both?.signal);
        } finally {
          busy.splice(busy.indexOf(began), 1);
          if (share) both?.release();
          share?.release();
        }
        if (got instanceof Unreached && !co.signal?.aborted) this.strike(idx);
        if (!(got instanceof Unreached)) {
          this.strikes[idx] = 0;
          this.next = idx;
          return got as T;
        }
        causes.push(got.cause);
        if (co.signal?.aborted) throw co.signal.reason;
        if (signal?.signal.aborted) break; // the budget is spent
        if (share?.signal.aborted && this.next === idx) this.next = (idx + 1) % n; // hung: the next calls start elsewhere
      }
      if (this.next === first) this.next = (first + 1) % n;
      throw new UnreachableError(unreached(method, n, budget?.signal.aborted ? co.budgetMs : undefined, causes), causes);
    } finally {
      signal?.release();
      budget?.release();
    }
  }

  /** target is method's URL at daemon idx (made once). */
  private target(idx: number, method: string): URL {
    const key = `${idx} ${method}`;
    let url = this.targets.get(key);
    if (!url) {
      url = new URL(SERVICE_PATH.slice(1) + method, this.o.urls[idx]);
      if (this.targets.size < MAX_TARGETS) this.targets.set(key, url);
    }
    return url;
  }

  /**
   * order is the daemons to try, from first on, and how many of them are
   * free: those passed over (a call outstanding past skipAfterMs, or one
   * that did not answer and has not answered a probe since) come last.
   * While another daemon is free, a daemon that did not answer is probed
   * in the background once its back-off is over.
   */
  private order(first: number): Order {
    const n = this.o.urls.length;
    const now = Date.now();
    const skip = this.o.skipAfterMs ?? Infinity;
    const free: number[] = [];
    const passed: number[] = [];
    for (let i = 0; i < n; i++) {
      const idx = (first + i) % n;
      const stuck = (this.busy[idx] as number[]).some((t) => now - t >= skip);
      (stuck || this.strikes[idx] ? passed : free).push(idx);
    }
    const clock = this.o.clock ?? Date.now;
    if (free.length > 0) {
      for (const idx of passed) {
        if (this.strikes[idx] && !this.probing[idx] && clock() >= (this.due[idx] as number)) void this.probe(idx);
      }
    }
    return { order: [...free, ...passed], free: free.length };
  }

  /** strike takes a call daemon idx did not answer. */
  private strike(idx: number): void {
    this.strikes[idx] = (this.strikes[idx] as number) + 1;
    this.due[idx] = (this.o.clock ?? Date.now)() + backoffMs(this.strikes[idx] as number);
  }

  /** probe asks daemon idx in the background: an answer within skipAfterMs (a refusal too: the daemon is there) takes it back. */
  private async probe(idx: number): Promise<void> {
    this.probing[idx] = true;
    this.probes++;
    const p = this.o.probe ?? { method: "BatchGet", body: { breakers: [] } };
    const began = Date.now();
    let ok: boolean;
    const bound = timeout(this.o.probeTimeoutMs ?? 2000);
    try {
      const url = this.target(idx, p.method);
      const busy = this.busy[idx] as number[];
      busy.push(began);
      try {
        ok = !((await this.attempt(url, JSON.stringify(p.body), bound.signal)) instanceof Unreached);
      } finally {
        busy.splice(busy.indexOf(began), 1);
        bound.release();
      }
    } catch (err) {
      ok = err instanceof APIError; // refused, but breakerd's own answer
    }
    if (ok && Date.now() - began <= (this.o.skipAfterMs ?? Infinity)) this.strikes[idx] = 0;
    else this.strike(idx);
    this.probing[idx] = false;
  }

  /** attempt sends one request to one daemon: the parsed answer, a typed error thrown, or Unreached. */
  private async attempt(url: URL, payload: string, signal: Stop | undefined): Promise<unknown> {
    const headers = this.headers({ "content-type": "application/json", accept: "application/json" });
    const got = this.o.unary ? await this.sendUnary(this.o.unary, url, headers, payload, signal) : await this.sendFetch(url, headers, payload, signal);
    if (got instanceof Unreached) return got;
    if (isRedirect(got.status)) throw refused(url, got);
    return answer(url.href, got, got.text);
  }

  /** sendUnary sends through the unary sender: its whole answer, or Unreached. */
  private async sendUnary(unary: Unary, url: URL, headers: Record<string, string>, payload: string, signal: Stop | undefined): Promise<UnaryAnswer | Unreached> {
    try {
      return await unary(url, headers, payload, signal, MAX_BODY_BYTES);
    } catch (err) {
      if (err instanceof BodyTooLarge) throw new ProtocolError(url.href, err.status, err.contentType, err.message);
      return new Unreached(err);
    }
  }

  /** sendFetch sends through fetch: its answer with the body read, or Unreached. */
  private async sendFetch(url: URL, headers: Record<string, string>, payload: string, signal: Stop | undefined): Promise<UnaryAnswer | Unreached> {
    let res: Response;
    try {
      res = await this.o.fetch(url, {
        method: "POST",
        headers,
        body: payload,
        signal: signal ? abortSignal(signal) : null,
        // A redirect could carry the breaker, worker id and message to
        // another origin: breakerd never redirects, so one is refused.
        redirect: "manual",
      });
    } catch (err) {
      return new Unreached(err);
    }
    const status = res.status;
    const header = (name: string) => res.headers.get(name);
    if (isRedirect(status) || res.type === "opaqueredirect") {
      await res.body?.cancel().catch(() => undefined);
      throw refused(url, { status, header });
    }
    try {
      return { status, header, text: await readBounded(res, MAX_BODY_BYTES) };
    } catch (err) {
      if (err instanceof TooLarge) throw new ProtocolError(url.href, status, header("content-type") ?? "", err.message);
      return new Unreached(err);
    }
  }
}

/** Answer is what answer reads of an HTTP answer beside its body: fetch's Response or the unary call's. */
interface Answer {
  status: number;
  header(name: string): string | null;
}

/** isRedirect says whether status is a 3xx. */
function isRedirect(status: number): boolean {
  return status >= 300 && status < 400;
}

/** refused is the error of a redirect: breakerd never redirects, and the request goes nowhere else. */
function refused(url: URL, res: Answer): ProtocolError {
  const to = res.header("location") ?? "";
  return new ProtocolError(url.href, res.status, res.header("content-type") ?? "", `a redirect${to ? ` to ${JSON.stringify(to)}` : ""}, refused (breakerd never redirects)`);
}

/**
 * unreached words an UnreachableError: "within" only when the budget ran
 * out, and the causes' own words (ECONNREFUSED, an HTTP 503...).
 */
function unreached(method: string, n: number, withinMs: number | undefined, causes: unknown[]): string {
  const why = [...new Set(causes.map(causeText).filter((c) => c !== ""))].join("; ");
  const within = withinMs !== undefined ? ` within ${withinMs} ms` : "";
  return `no breakerd answered ${method}${within} (${n} URL${n === 1 ? "" : "s"})${why ? `: ${why}` : ""}`;
}

/** causeText is one failure's words, with its own cause's (fetch's "fetch failed" hides ECONNREFUSED there). */
export function causeText(err: unknown): string {
  if (!(err instanceof Error)) return err === undefined ? "" : String(err);
  const inner = (err as { cause?: unknown }).cause;
  const innerText = inner instanceof Error ? coded(inner) : "";
  const own = coded(err);
  return innerText && innerText !== own ? `${own}: ${innerText}` : own;
}

/** coded is an error's message, led by its system code when the message leaves it out (Node's "aborted" is an ECONNRESET). */
function coded(err: Error): string {
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" && !err.message.includes(code) ? `${code} ${err.message}` : err.message;
}

/** TooLarge is a body over its bound. */
export class TooLarge extends Error {
  constructor(limit: number) {
    super(`the body is over ${limit} bytes; refused`);
  }
}

/**
 * readBounded reads a response's body as text, at most limit bytes: a
 * longer one is cancelled and TooLarge thrown, so a hostile or broken
 * server cannot grow the process. The call's signal bounds the time.
 */
export async function readBounded(res: Response, limit: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const decoder = new TextDecoder("utf-8");
  let n = 0;
  let text = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text + decoder.decode();
      n += value.byteLength;
      if (n > limit) throw new TooLarge(limit);
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    reader.releaseLock();
    await res.body.cancel().catch(() => undefined);
  }
}

/** answer reads one HTTP answer: the parsed JSON, a typed error thrown, or Unreached. */
function answer(url: string, res: Answer, text: string): unknown {
  const ctype = res.header("content-type") ?? "";
  const json = ctype.split(";")[0]?.trim().toLowerCase() === "application/json";
  let parsed: unknown;
  // A proxy's gateway answer for a daemon it cannot reach: that daemon is away.
  const away = () => new Unreached(new ProtocolError(url, res.status, ctype, `a gateway error that is not breakerd's: ${snippet(text)}`));
  if (json) {
    try {
      parsed = JSON.parse(text);
    } catch {
      if (GATEWAY.has(res.status)) return away();
      throw new ProtocolError(url, res.status, ctype, `the body is not JSON: ${snippet(text)}`);
    }
  }
  if (res.status >= 200 && res.status < 300) {
    if (!json || typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw new ProtocolError(url, res.status, ctype, `want a JSON object, got ${snippet(text)}`);
    }
    return parsed;
  }
  if (!json && text.trimStart().startsWith("{")) {
    // An error body in breakerd's JSON under another content type (a proxy
    // or transcoder that relabels it): still the daemon's own answer.
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
  }
  const eb = (typeof parsed === "object" && parsed !== null ? parsed : {}) as ErrorBody;
  const code = codeName(eb.code) || (res.status === 401 ? "unauthenticated" : res.status === 403 ? "permission_denied" : "");
  const msg = typeof eb.message === "string" ? eb.message : snippet(text);
  const violations = (Array.isArray(eb.field_violations) ? eb.field_violations : []).map((v) => ({
    field: String(v?.field ?? ""),
    description: String(v?.description ?? ""),
  }));
  if (res.status === 401 || res.status === 403) {
    throw new AuthError(code, `${msg || `HTTP ${res.status}`} (check the token option)`, violations, res.status, url);
  }
  if (typeof eb.code !== "string" || !code) {
    if (GATEWAY.has(res.status)) return away();
    throw new ProtocolError(url, res.status, ctype, `want breakerd's JSON error, got ${snippet(text)}`);
  }
  if (REACH_CODES.has(code)) return new Unreached(new APIError(code, msg, violations, res.status, url));
  throw new APIError(code, msg, violations, res.status, url);
}

/** codeName normalizes a gRPC code's name to its JSON form: "INVALID_ARGUMENT" -> "invalid_argument". */
function codeName(v: unknown): string {
  return typeof v === "string" ? v.toLowerCase() : "";
}

function snippet(text: string): string {
  const one = text.replace(/\s+/g, " ").trim();
  return JSON.stringify(one.length > 120 ? one.slice(0, 120) + "…" : one);
}

/** A Bound is a signal made for one call; release drops its timer or listeners once the call is over. */
export interface Bound {
  signal: Stop;
  release(): void;
}

/** Deadline is timeout's signal: an Ender, no AbortController made for a call that ends in time. */
class Deadline implements Ender {
  aborted = false;
  reason: unknown = undefined;
  private fns: (() => void)[] = [];

  /** end ends the deadline with reason and tells its listeners, once. */
  end(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const fns = this.fns;
    this.fns = [];
    for (const fn of fns) fn();
  }

  on(fn: () => void): void {
    if (!this.aborted) this.fns.push(fn);
  }

  off(fn: () => void): void {
    const i = this.fns.indexOf(fn);
    if (i >= 0) this.fns.splice(i, 1);
  }
}

/**
 * timeout is a signal that ends after ms with a TimeoutError, as
 * AbortSignal.timeout's does, but whose timer release clears: a call
 * answered in time leaves no timer behind it, and the timer never keeps
 * the process alive.
 */
export function timeout(ms: number): Bound {
  const d = new Deadline();
  const t = setTimeout(() => d.end(new DOMException("The operation was aborted due to timeout", "TimeoutError")), ms);
  (t as { unref?: () => void }).unref?.();
  return { signal: d, release: () => clearTimeout(t) };
}

/** abortSignal is s as an AbortSignal, for fetch: s itself, or one that aborts with it. */
function abortSignal(s: Stop): AbortSignal {
  if (!("on" in s)) return s;
  const c = new AbortController();
  if (s.aborted) c.abort(s.reason);
  else s.on(() => c.abort(s.reason));
  return c.signal;
}

/**
 * anySignal is a signal that aborts when any of the given ones does
 * (AbortSignal.any is Node ≥ 20.3); release takes its listeners off the
 * given signals, so a caller's long-lived signal does not gather one per
 * call. Undefined when none is given.
 */
export function anySignal(signals: (Stop | undefined)[]): Bound | undefined {
  const live = signals.filter((s): s is Stop => s !== undefined);
  if (live.length === 0) return undefined;
  if (live.length === 1) return { signal: live[0] as Stop, release: () => undefined };
  const c = new AbortController();
  for (const s of live) {
    if (s.aborted) {
      c.abort(s.reason);
      return { signal: c.signal, release: () => undefined };
    }
  }
  const release = () => {
    for (const s of live) offStop(s, onAbort);
  };
  const onAbort = () => {
    c.abort(live.find((s) => s.aborted)?.reason);
    release();
  };
  for (const s of live) onStop(s, onAbort);
  return { signal: c.signal, release };
}
