// The unary sender on kept sockets (src/unary.ts): answers read whole
// however their bytes arrive and however they are framed, connections
// kept, bounded and let go as node:http's agent did, and every failure
// typed as the transport expects.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { MAX_BODY_BYTES } from "../src/transport.js";
import { BodyTooLarge, MAX_FRAMING, MAX_HEAD, MAX_HEADERS, MAX_SOCKETS, Reader, socketUnary } from "../src/unary.js";
import { startDaemon } from "./daemon.js";
import { json, serve, waitFor, within } from "./helpers.js";

/** raw serves every connection with fn; it counts the connections. */
async function raw(fn: (s: Socket) => void): Promise<{ url: URL; conns: () => number; close: () => Promise<void> }> {
  let n = 0;
  const open = new Set<Socket>();
  const srv: NetServer = createNetServer((s) => {
    n++;
    open.add(s);
    s.on("close", () => open.delete(s));
    s.on("error", () => undefined);
    fn(s);
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const port = (srv.address() as AddressInfo).port;
  return {
    url: new URL(`http://127.0.0.1:${port}/breakerd.v1.BreakerService/Get`),
    conns: () => n,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        srv.close(() => resolve());
      }),
  };
}

/** onRequests calls fn for each whole request head and body read from s (Content-Length framed). */
function onRequests(s: Socket, fn: (head: string, body: string) => void): void {
  let buf = "";
  s.setEncoding("latin1");
  s.on("data", (c: string) => {
    buf += c;
    for (;;) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.slice(0, end);
      const n = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + n) return;
      fn(head, buf.slice(end + 4, end + 4 + n));
      buf = buf.slice(end + 4 + n);
    }
  });
}

const enc = new TextEncoder();

const answers: Record<string, string> = {
  length: 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"ok":"héllo"}',
  chunked: 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{"ok":\r\n9;ext=1\r\n"héllo"}\r\n0\r\nX-Trailer: t\r\n\r\n',
  interim: 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"ok":"héllo"}',
  "no content": "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
};

/** read pushes bytes to a new Reader at once, ended or not. */
function read(bytes: Uint8Array, limit = MAX_BODY_BYTES, ended = false) {
  return new Reader(limit).push(bytes, ended);
}

/** readsWhole asserts text is read as one kept answer whose body is want: at once, one byte at a time (whole only at the last), never from a prefix, and not past its end. */
function readsWhole(kind: string, text: string, want: string): void {
  const bytes = enc.encode(text);
  for (let i = 0; i < bytes.byteLength; i++) assert.equal(read(bytes.subarray(0, i)), undefined, `${kind}: an answer from ${i} of ${bytes.byteLength} bytes`);
  const whole = read(bytes);
  assert.ok(whole, `${kind}: no answer from its whole bytes`);
  assert.equal(whole.answer.text, want, kind);
  assert.equal(whole.keep, true, kind);
  assert.equal(whole.rest.byteLength, 0, kind);
  const r = new Reader(MAX_BODY_BYTES);
  for (let i = 0; i < bytes.byteLength - 1; i++) assert.equal(r.push(bytes.subarray(i, i + 1), false), undefined, `${kind}: an answer at byte ${i}, one by one`);
  const last = r.push(bytes.subarray(bytes.byteLength - 1), false);
  assert.equal(last?.answer.text, want, `${kind}, one by one`);
  // What follows the answer is not its own.
  const more = read(enc.encode(text + "HTTP/1.1 200"));
  assert.equal(latin1(more?.rest), "HTTP/1.1 200", kind);
}

test("an answer is read whole from its bytes, at once or one by one, and never from a prefix of them", () => {
  for (const [kind, text] of Object.entries(answers)) readsWhole(kind, text, kind === "no content" ? "" : '{"ok":"héllo"}');
  // An answer whose body runs to the close is whole only at the close.
  const close = enc.encode("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nup to the end");
  assert.equal(read(close), undefined);
  const atEnd = read(close, MAX_BODY_BYTES, true);
  assert.ok(atEnd);
  assert.equal(atEnd.answer.text, "up to the end");
  assert.equal(atEnd.answer.header("Content-Type"), "text/plain");
  assert.equal(atEnd.keep, false);
});

function latin1(b: Uint8Array | undefined): string {
  return b ? new TextDecoder("latin1").decode(b) : "";
}

/** bareLF are answers whose lines end in a bare LF, or in CRLF and LF mixed. */
const bareLF: Record<string, string> = {
  length: 'HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 15\n\n{"ok":"héllo"}',
  chunked: 'HTTP/1.1 200 OK\nContent-Type: application/json\nTransfer-Encoding: chunked\n\n6\n{"ok":\n9;ext=1\n"héllo"}\n0\nX-Trailer: t\nX-Other: u\n\n',
  interim: 'HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 15\n\n{"ok":"héllo"}',
  "mixed length": 'HTTP/1.1 200 OK\r\nContent-Type: application/json\nContent-Length: 15\r\n\n{"ok":"héllo"}',
  "mixed blank line": 'HTTP/1.1 200 OK\nContent-Type: application/json\r\nContent-Length: 15\n\r\n{"ok":"héllo"}',
  "mixed chunked": 'HTTP/1.1 200 OK\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\n6\r\n{"ok":\n9;ext=1\n"héllo"}\r\n0\nX-Trailer: t\r\nX-Other: u\n\r\n',
  "mixed interim": 'HTTP/1.1 100 Continue\r\n\nHTTP/1.1 200 OK\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"ok":"héllo"}',
};

test("an answer's lines may end in a bare LF as well as CRLF, mixed: read whole at once or one by one, never from a prefix", () => {
  for (const [kind, text] of Object.entries(bareLF)) {
    readsWhole(kind, text, '{"ok":"héllo"}');
    const a = read(enc.encode(text))?.answer;
    assert.equal(a?.status, 200, kind);
    assert.equal(a?.header("Content-Type"), "application/json", `${kind}: a header's value, its line end left off`);
    assert.equal(a?.header("X-Trailer"), null, kind);
  }
  // A lone CR within a line is the line's, as with CRLF: the LF alone ends it.
  assert.equal(read(enc.encode("HTTP/1.1 200 OK\nX-A: a\rb\nContent-Length: 0\n\n"))?.answer.header("X-A"), "a\rb");
  assert.equal(read(enc.encode("HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n"))?.answer.header("X-A"), "a\rb");
  // A chunk still ends where its size says: its data then an LF or CRLF.
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nabc\n"), 10), /longer than its size/);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nab\rc\n"), 10), /longer than its size/);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\nContent-Length: 15\n\n{"), MAX_BODY_BYTES, true), /closed within the answer's body/);
});

/** lfHead is a bare-LF head of exactly size bytes, its blank line in them, with lines header lines after its status line. */
function lfHead(size: number, lines = 2): string {
  const fixed = "HTTP/1.1 200 OK\nContent-Length: 0\n";
  const pads = Array.from({ length: lines - 1 }, (_, i) => `X-${i}: y\n`).join("");
  const last = size - fixed.length - pads.length - "X-Pad: \n\n".length;
  return `${fixed}${pads}X-Pad: ${"y".repeat(last)}\n\n`;
}

test(`bare-LF heads are held to the bounds: ${MAX_HEADERS} lines, ${MAX_HEAD} bytes, ${MAX_FRAMING} bytes of framing`, () => {
  // MAX_HEADERS lines after the status line are read; one more is refused.
  const lines = (n: number) => "HTTP/1.1 200 OK\nContent-Length: 0\n" + Array.from({ length: n - 1 }, (_, i) => `X-${i}: y\n`).join("") + "\n";
  assert.equal(read(enc.encode(lines(MAX_HEADERS)))?.answer.status, 200);
  assert.throws(() => read(enc.encode(lines(MAX_HEADERS + 1))), /more than 100 lines/);
  assert.throws(() => read(enc.encode(lines(MAX_HEADERS + 1).replace(/\n/g, "\r\n").replace(/\r\n(X-7:)/, "\n$1"))), /more than 100 lines/);
  // A head of MAX_HEAD bytes, its blank line in them, is read; one a byte over is refused, at once or one by one.
  const at = enc.encode(lfHead(MAX_HEAD));
  assert.equal(at.byteLength, MAX_HEAD);
  assert.equal(read(at)?.answer.header("content-length"), "0");
  const over = enc.encode(lfHead(MAX_HEAD + 1));
  assert.throws(() => read(over), /head over/);
  const r = new Reader(MAX_BODY_BYTES);
  assert.throws(() => {
    for (let i = 0; i < over.byteLength; i++) assert.equal(r.push(over.subarray(i, i + 1), false), undefined);
  }, /head over/);
  const crlfBlank = enc.encode(lfHead(MAX_HEAD + 1).replace(/\n\n$/, "\n\r\n"));
  assert.equal(crlfBlank.byteLength, MAX_HEAD + 2);
  assert.throws(() => read(crlfBlank), /head over/);
  assert.equal(read(enc.encode(lfHead(MAX_HEAD - 1).replace(/\n\n$/, "\n\r\n")))?.answer.status, 200);
  // Framing: interim heads and chunk lines, however short their line ends.
  assert.throws(() => read(enc.encode("HTTP/1.1 100 Continue\n\n".repeat(3000))), /heads and chunk lines over/);
  const ext = `1;${"e".repeat(10_000)}\nx\n`.repeat(10);
  assert.throws(() => read(enc.encode(`HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n${ext}`)), /heads and chunk lines over/);
  const trailers = Array.from({ length: MAX_HEADERS + 1 }, (_, i) => `X-${i}: t\n`).join("");
  assert.throws(() => read(enc.encode(`HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n0\n${trailers}\n`)), /more than 100 trailer lines/);
});

test("an answer cut short, over a bound or not HTTP is refused", () => {
  const whole = enc.encode(answers["length"] as string);
  assert.throws(() => read(whole.subarray(0, 40), MAX_BODY_BYTES, true), /closed within the answer's head/);
  assert.throws(() => read(whole.subarray(0, whole.byteLength - 1), MAX_BODY_BYTES, true), /closed within the answer's body/);
  assert.throws(() => read(enc.encode("SSH-2.0-OpenSSH\r\n\r\n")), /not an HTTP status line/);
  assert.throws(() => read(enc.encode(`HTTP/1.1 200 OK\r\nX: ${"y".repeat(20_000)}`)), /head over/);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"), 10), BodyTooLarge);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n"), 10), BodyTooLarge);
  assert.throws(() => read(enc.encode("HTTP/1.0 200 OK\r\n\r\n" + "x".repeat(11)), 10), BodyTooLarge);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), 10), /Content-Length/);
  assert.throws(() => read(enc.encode("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"), 10), /longer than its size/);
  // Framing is bounded however small each piece: interim answers, chunk
  // extensions.
  assert.throws(() => read(enc.encode("HTTP/1.1 100 Continue\r\n\r\n".repeat(3000))), /heads and chunk lines over/);
  const ext = `1;${"e".repeat(10_000)}\r\nx\r\n`.repeat(10);
  assert.throws(() => read(enc.encode(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${ext}`)), /heads and chunk lines over/);
});

test("answers in bare-LF lines keep their connection for the next call", async () => {
  let n = 0;
  const s = await raw((sock) =>
    onRequests(sock, () => {
      const lf = n++ % 2 === 0 ? bareLF["length"] : bareLF["mixed chunked"];
      sock.write(lf as string);
    }),
  );
  const u = socketUnary()!;
  try {
    for (let i = 0; i < 6; i++) assert.equal((await within(`answer ${i}`, u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES), 5000)).text, '{"ok":"héllo"}');
    assert.equal(s.conns(), 1, "sequential calls on one connection");
  } finally {
    u.close();
    await s.close();
  }
});

test("calls share kept connections, a closing answer's connection is not kept, and close ends them", async () => {
  let closing = false;
  const s = await raw((sock) =>
    onRequests(sock, () => {
      const body = '{"n":1}';
      sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n${closing ? "Connection: close\r\n" : ""}\r\n${body}`);
      if (closing) sock.end();
    }),
  );
  const u = socketUnary()!;
  try {
    for (let i = 0; i < 20; i++) assert.equal((await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES)).text, '{"n":1}');
    assert.equal(s.conns(), 1, "sequential calls on one connection");
    closing = true;
    await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES);
    closing = false;
    await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES);
    assert.equal(s.conns(), 2, "a connection after the one the daemon closed");
  } finally {
    u.close();
    await s.close();
  }
});

test("a kept connection the daemon closed goes once more on a fresh one; a fresh one that fails is the call's error", async () => {
  // The daemon drops each connection, unanswered, at its second request:
  // as one it had closed while idle would be when the request went out.
  let requests = 0;
  const s = await raw((sock) => {
    let n = 0;
    onRequests(sock, () => {
      requests++;
      if (++n === 2) sock.destroy();
      else sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    });
  });
  const u = socketUnary()!;
  try {
    await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES);
    assert.equal((await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES)).text, "{}");
    assert.equal(requests, 3, "the second call went twice");
    assert.equal(s.conns(), 2);
  } finally {
    u.close();
    await s.close();
  }
  const refused = await raw((sock) => sock.destroy());
  const v = socketUnary()!;
  try {
    await assert.rejects(v.unary(refused.url, {}, "{}", undefined, MAX_BODY_BYTES), (e: unknown) => e instanceof TypeError && /fetch failed/.test(e.message));
    assert.equal(refused.conns(), 1, "a fresh connection's failure is not tried again");
  } finally {
    v.close();
    await refused.close();
  }
});

test(`past ${MAX_SOCKETS} connections calls wait for one; a waiting call's signal ends it`, async () => {
  const held: Array<() => void> = [];
  const s = await raw((sock) => onRequests(sock, () => held.push(() => sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))));
  const u = socketUnary()!;
  try {
    const calls = Array.from({ length: MAX_SOCKETS + 6 }, () => u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES));
    await waitFor(() => held.length === MAX_SOCKETS, `${MAX_SOCKETS} requests held at the daemon`);
    const ctl = new AbortController();
    const waiting = u.unary(s.url, {}, "{}", ctl.signal, MAX_BODY_BYTES);
    ctl.abort(new Error("caller gave up"));
    await assert.rejects(waiting, /caller gave up/);
    while (held.length > 0) held.shift()!();
    await waitFor(() => held.length === 6, "the waiting calls sent on the connections let go");
    while (held.length > 0) held.shift()!();
    for (const a of await Promise.all(calls)) assert.equal(a.status, 200);
    assert.equal(s.conns(), MAX_SOCKETS);
  } finally {
    u.close();
    await s.close();
  }
});

test("a header that carries a line break is refused before anything is sent", async () => {
  const s = await serve((_req, res) => json(res, 200, {}));
  const u = socketUnary()!;
  try {
    await assert.rejects(u.unary(new URL(s.url), { authorization: "Bearer x\r\nX-Evil: 1" }, "{}", undefined, MAX_BODY_BYTES), /line break/);
    assert.equal(s.hits.size, 0);
  } finally {
    u.close();
    await s.close();
  }
});

test("a chunked answer of node's server is read whole, and one over the bound refused", async () => {
  const big = "x".repeat(200_000);
  const s = await serve((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write('{"pad":"');
    res.write(big);
    res.end('"}');
  });
  const u = socketUnary()!;
  try {
    const a = await u.unary(new URL(s.url), {}, "{}", undefined, MAX_BODY_BYTES);
    assert.equal((JSON.parse(a.text) as { pad: string }).pad, big);
    await assert.rejects(u.unary(new URL(s.url), {}, "{}", undefined, 100_000), (e: unknown) => e instanceof BodyTooLarge && e.status === 200 && e.contentType === "application/json");
  } finally {
    u.close();
    await s.close();
  }
});

/** pki writes a CA and a certificate it signed for localhost and 127.0.0.1 (openssl), in dir. */
function pki(dir: string): { ca: string; cert: string; key: string } {
  const f = (name: string) => join(dir, name);
  const run = (...args: string[]) => execFileSync("openssl", args, { stdio: "pipe" });
  run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=test CA", "-keyout", f("ca.key"), "-out", f("ca.pem"));
  run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost", "-keyout", f("key.pem"), "-out", f("req.csr"));
  writeFileSync(f("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  run("x509", "-req", "-in", f("req.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", f("ext.cnf"), "-out", f("cert.pem"));
  return { ca: f("ca.pem"), cert: f("cert.pem"), key: f("key.pem") };
}

test("over https a call verifies the daemon's certificate for its host name", async () => {
  const dir = mkdtempSync(join(tmpdir(), "breakerd-ts-tls-"));
  const { ca, cert, key } = pki(dir);
  const d = await startDaemon({ tls: { cert, key } });
  try {
    const port = new URL(d.url).port;
    // A client that trusts the CA (NODE_EXTRA_CA_CERTS, read as node
    // starts) is answered, by name and by address; the call is the
    // client's own Allow, in a child process.
    const client = new URL("../src/index.js", import.meta.url).href;
    const script = `import { Client } from ${JSON.stringify(client)};
      for (const host of ["localhost", "127.0.0.1"]) {
        const c = new Client({ urls: "https://" + host + ":${port}", workerId: "tls-1", savingsIntervalMs: 0, rpcTimeoutMs: 30000, allowBudgetMs: 30000 });
        const p = await c.allow("tls-" + host);
        await c.close();
        if (!p.allowed || p.degraded) throw new Error(host + ": " + JSON.stringify(p));
      }`;
    execFileSync(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: ca }, stdio: "pipe" });
    // Without the CA, the certificate is refused: the daemon is not reached.
    const u = socketUnary()!;
    try {
      await assert.rejects(u.unary(new URL(`https://localhost:${port}/breakerd.v1.BreakerService/Get`), {}, "{}", undefined, MAX_BODY_BYTES), (e: unknown) => {
        const cause = (e as { cause?: { code?: string } }).cause;
        return e instanceof TypeError && cause?.code === "UNABLE_TO_VERIFY_LEAF_SIGNATURE";
      });
    } finally {
      u.close();
    }
  } finally {
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("close ends the calls in flight and those waiting for a connection, and opens none; a call after it opens anew", async () => {
  let requests = 0;
  const held: Array<() => void> = [];
  const s = await raw((sock) =>
    onRequests(sock, () => {
      if (++requests === 1) sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
      else held.push(() => sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"));
    }),
  );
  const u = socketUnary()!;
  try {
    await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES); // a kept connection
    const calls = Array.from({ length: MAX_SOCKETS + 3 }, () => u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES).then(() => "answered", (e: unknown) => e));
    await waitFor(() => held.length === MAX_SOCKETS, `${MAX_SOCKETS} requests held at the daemon`);
    u.close();
    for (const got of await within("every call ended by close", Promise.all(calls))) assert.ok(got instanceof TypeError && /closed/.test(String(got.cause)), `a call at close: ${String(got)}`);
    assert.equal(requests, 1 + MAX_SOCKETS, "a request sent again, or a waiting one sent, after close");
    assert.equal(s.conns(), MAX_SOCKETS, "a connection opened at close");
    held.length = 0;
    requests = 0;
    assert.equal((await u.unary(s.url, {}, "{}", undefined, MAX_BODY_BYTES)).status, 200);
  } finally {
    u.close();
    await s.close();
  }
});
