// The event-stream reader, fed chunks split at every awkward place.

import assert from "node:assert/strict";
import { test } from "node:test";

import { readSSE, type SSEMessage } from "../src/index.js";

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(enc.encode(ch));
      c.close();
    },
  });
}

async function all(chunks: string[]): Promise<SSEMessage[]> {
  const out: SSEMessage[] = [];
  for await (const m of readSSE(streamOf(chunks))) out.push(m);
  return out;
}

const wire =
  "\uFEFF: heartbeat\r\n" +
  "event: snapshot\r\ndata: {\"states\":[]}\r\n\r\n" +
  "id: pay/1-0\nevent: transition\ndata: {\"a\":\ndata: 1}\n\n" +
  "id: pay/2-0\rdata:x\r\r" +
  "event: resync\ndata\n\n" +
  "id: never/dispatched\n\n" +
  "data: cut off without a blank line";

const want: SSEMessage[] = [
  { event: "snapshot", data: '{"states":[]}', id: "" },
  { event: "transition", data: '{"a":\n1}', id: "pay/1-0" },
  { event: "message", data: "x", id: "pay/2-0" },
  { event: "resync", data: "", id: "pay/2-0" },
];

test("readSSE: events, ids, multi-line data, comments, every line ending", async () => {
  assert.deepEqual(await all([wire]), want);
});

test("readSSE: the same bytes split at every position read the same", async () => {
  const whole = await all([wire]);
  for (let i = 1; i < wire.length; i++) {
    assert.deepEqual(await all([wire.slice(0, i), wire.slice(i)]), whole, `split at ${i}`);
  }
});

test("readSSE: a field with no colon has an empty value (event: resync with empty data dispatches)", async () => {
  const got = await all(["event: resync\ndata\n\n"]);
  assert.deepEqual(got, [{ event: "resync", data: "", id: "" }]);
});
