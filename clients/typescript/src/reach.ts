// Whether any daemon answers, said once, and re-probed in the background.
// A daemon that refuses is gone at once; one that accepts and never
// answers (hung) is gone once a call has waited the RPC timeout for it.
// While no daemon answers, the client stops waiting for one: its calls
// answer from the fallback at once, and the daemons are asked again (a
// cheap authenticated call, in the background) on the Go client's
// schedule: after backoffMs (1 s, doubling to 30 s), timed on the
// client's clock. The loss and the return are each told once (onError).

import { ReachableAgain, UnreachableError } from "./errors.js";

/** The back-off of a daemon (or of every daemon) that did not answer, ms: the Go client's (pkg/client/pick.go, hungBackoff). */
export const BACKOFF_MS = 1000;
export const BACKOFF_MAX_MS = 30_000;

/** How often, in real ms, the background re-probe reads the clock. */
const TICK_MS = 50;

/** backoffMs is how long to wait after strikes failures in a row (1 s, doubling to 30 s). */
export function backoffMs(strikes: number): number {
  return Math.min(BACKOFF_MS * 2 ** Math.min(Math.max(strikes, 1) - 1, 5), BACKOFF_MAX_MS);
}

export interface ReachOptions {
  /** The daemon URLs, for the message. */
  urls: string;
  /** One cheap call: resolves true when a daemon answered. */
  probe: () => Promise<boolean>;
  /** Told once per loss, and once per return (ReachableAgain). */
  onError: (err: unknown) => void;
  /** The client's clock, ms: times the back-off. */
  clock: () => number;
}

/** Reach is the client's verdict on its daemons. */
export class Reach {
  private isDown = false;
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  private strikes = 0;
  private dueMs = 0;
  /** A re-probe is out. */
  probing = false;
  /** Times every daemon went quiet (for tests). */
  losses = 0;
  /** Re-probes started (for tests). */
  probes = 0;

  constructor(private readonly o: ReachOptions) {}

  /** down is true while no daemon answers: calls do not wait. */
  get down(): boolean {
    return this.isDown;
  }

  /** failed takes a call no daemon answered within the RPC timeout: the first makes the client down and says so. */
  failed(why: UnreachableError): void {
    if (this.isDown || this.closed) return;
    this.isDown = true;
    this.losses++;
    this.strikes = 1;
    this.dueMs = this.o.clock() + backoffMs(1);
    this.o.onError(
      new UnreachableError(
        `no breakerd at ${this.o.urls} answers (${why.message}); answering from the local fallback and asking again after ${BACKOFF_MS} ms, backing off to ${BACKOFF_MAX_MS} ms (client.check() rejects with the cause)`,
        why.causes,
      ),
    );
    this.timer = setInterval(() => this.poll(), TICK_MS);
    (this.timer as { unref?: () => void }).unref?.(); // never keeps the process alive
  }

  /** answered takes any daemon's answer: the client is up again, said once. */
  answered(): void {
    if (!this.isDown) return;
    this.isDown = false;
    clearInterval(this.timer);
    this.timer = undefined;
    if (!this.closed) this.o.onError(new ReachableAgain(`a daemon at ${this.o.urls} answers again; the local fallback stands down`));
  }

  /** poll starts a re-probe when one is due (the timer polls; so does each call while down). */
  poll(): void {
    if (!this.isDown || this.probing || this.closed || this.o.clock() < this.dueMs) return;
    this.probing = true;
    this.probes++;
    void this.o.probe().then(
      (ok) => this.settle(ok),
      () => this.settle(false),
    );
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
  }

  private settle(ok: boolean): void {
    if (ok) this.answered();
    else {
      this.strikes++;
      this.dueMs = this.o.clock() + backoffMs(this.strikes);
    }
    this.probing = false;
  }
}
