// A TCP proxy in front of a real daemon, for gray faults: stall (accept
// and keep connections, forward nothing), delay (each answer chunk held
// back), hold (requests go through, answers are held back), and restore.
// Counts the connections it accepted, the requests sent through it (each
// HTTP request line, answered or not) and how many were outstanding at
// the daemon at once (sent on, their answer's status line not yet back).

import { connect, createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";

/** Proxy forwards a loopback port to a daemon's URL. */
export class Proxy {
  connections = 0;
  /** HTTP requests forwarded toward the daemon. */
  requests = 0;
  /** The same, by method (the path's last part: Allow, Record, BatchGet...). */
  readonly methods = new Map<string, number>();
  /** Requests sent on whose answer has not come back. */
  outstanding = 0;
  /** The most requests outstanding at once. */
  maxOutstanding = 0;
  /** How long each chunk of an answer is held back, ms. */
  delayMs = 0;
  private flowing = true;
  private answering = true;
  private readonly waiting: (() => void)[] = [];
  private readonly socks = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(target: string): Promise<Proxy> {
    const t = new URL(target);
    let self: Proxy | undefined;
    const server = createServer((down) => self!.serve(down, t));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    self = new Proxy(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return self;
  }

  /** stall keeps every connection (new ones too) and forwards nothing. */
  stall(): void {
    this.flowing = false;
  }

  /** hold sends requests on and holds every answer back (new ones too) until restore. */
  hold(): void {
    this.answering = false;
  }

  restore(): void {
    this.flowing = true;
    this.answering = true;
    for (const go of this.waiting.splice(0)) go();
  }

  async close(): Promise<void> {
    this.restore();
    for (const s of this.socks) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private serve(down: Socket, t: URL): void {
    this.connections++;
    const up = connect(Number(t.port), t.hostname);
    for (const s of [down, up]) {
      this.socks.add(s);
      s.on("error", () => undefined);
      s.on("close", () => (this.socks.delete(s), down.destroy(), up.destroy()));
    }
    this.pump(down, up, 0);
    this.pump(up, down, 1);
  }

  /** pump forwards src to dst in order, holding chunks while stalled (and answers for delayMs). */
  private pump(src: Socket, dst: Socket, answers: number): void {
    let chain = Promise.resolve();
    src.on("data", (chunk: Buffer) => {
      if (!answers) {
        for (const m of chunk.toString("latin1").matchAll(/POST \/\S*?([A-Za-z]+) HTTP/g)) {
          this.requests++;
          this.methods.set(m[1]!, (this.methods.get(m[1]!) ?? 0) + 1);
        }
      }
      chain = chain.then(async () => {
        if (!this.flowing || (answers && !this.answering)) await new Promise<void>((go) => this.waiting.push(go));
        if (answers && this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
        if (dst.destroyed) return;
        // Counted as the chunk goes on: a request outstanding at the daemon, an answer back.
        const lines = chunk.toString("latin1").match(answers ? /HTTP\/1\.1 \d{3} /g : /POST \/\S* HTTP\/1\.1\r\n/g)?.length ?? 0;
        this.outstanding += answers ? -lines : lines;
        this.maxOutstanding = Math.max(this.maxOutstanding, this.outstanding);
        dst.write(chunk);
      });
    });
  }
}
