// Whether any daemon answers, said once, and re-probed in the background.
// A daemon that refuses is gone at once; one that accepts and never
// answers (hung) is gone once a call has waited the RPC timeout for it.
// While no daemon answers, the client stops waiting for one: its calls
// answer from the fallback at once, and a timer asks the daemons (a
// cheap authenticated call) until one answers.

import { UnreachableError } from "./errors.js";

/** REPROBE_MS is how often a client no daemon answers asks again. */
export const REPROBE_MS = 1000;

export interface ReachOptions {
  /** The daemon URLs, for the message. */
  urls: string;
  /** One cheap call: resolves true when a daemon answered. */
  probe: () => Promise<boolean>;
  /** Told once per loss. */
  onError: (err: unknown) => void;
  reprobeMs?: number | undefined;
}

/** Reach is the client's verdict on its daemons. */
export class Reach {
  private isDown = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private closed = false;
  /** Times every daemon went quiet (for tests). */
  losses = 0;

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
    const every = this.o.reprobeMs ?? REPROBE_MS;
    this.o.onError(
      new UnreachableError(
        `no breakerd at ${this.o.urls} answers (${why.message}); answering from the local fallback and asking again every ${every} ms (client.check() rejects with the cause)`,
        why.causes,
      ),
    );
    this.schedule();
  }

  /** answered takes any daemon's answer: the client is up again. */
  answered(): void {
    this.isDown = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      void this.o.probe().then((ok) => {
        if (ok) this.answered();
        else if (this.isDown && !this.closed) this.schedule();
      });
    }, this.o.reprobeMs ?? REPROBE_MS);
    (this.timer as { unref?: () => void }).unref?.(); // never keeps the process alive
  }
}
