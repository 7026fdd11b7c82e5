// The examples' payment and search vendors: HTTP servers of the
// example's own that answer 200, or 503 once down, and count requests.

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
