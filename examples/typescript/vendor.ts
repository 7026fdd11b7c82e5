// What the examples share that is not breakerd's: their payment and
// search vendors (HTTP servers of the example's own that answer 200, or
// 503 once down, and count requests) and the story they tell, eight
// customer requests on two workers with the payment vendor down from the
// third on.

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** Vendor is a running vendor. */
export interface Vendor {
  url: string;
  hits: () => number;
  down: (d: boolean) => void;
  close: () => void;
}

/** vendor starts one on a free loopback port. */
export async function vendor(): Promise<Vendor> {
  let hits = 0;
  let isDown = false;
  const srv: Server = createServer((_req, res) => {
    hits++;
    res.writeHead(isDown ? 503 : 200, { "content-type": "application/json" });
    res.end(isDown ? '{"error":{"code":"unavailable"}}' : '{"ok":true}');
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    hits: () => hits,
    down: (d) => (isDown = d),
    close: () => srv.close(),
  };
}

/** Request is one customer request of the story: the worker it runs on and the vendors' URLs. */
export interface Request {
  workerId: string;
  payments: string;
  search: string;
}

/** story runs handle for each of eight requests, alternating two workers; the payment vendor goes down before the third. */
export async function story(log: (s: string) => void, handle: (r: Request) => Promise<void>): Promise<void> {
  const payments = await vendor();
  const search = await vendor();
  try {
    for (let n = 1; n <= 8; n++) {
      if (n === 3) {
        payments.down(true);
        log("\n*** the payment vendor goes down (HTTP 503) ***");
      }
      const workerId = `worker-${((n - 1) % 2) + 1}`;
      log(`\nrequest ${n} on ${workerId}:`);
      await handle({ workerId, payments: payments.url, search: search.url });
    }
    log(`\nthe payment vendor saw ${payments.hits()} requests`);
  } finally {
    payments.close();
    search.close();
  }
}
