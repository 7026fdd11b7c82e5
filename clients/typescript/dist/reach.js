// Whether any daemon answers, said once, and re-probed in the background.
// A daemon that refuses is gone at once; one that accepts and never
// answers (hung) is gone once a call has waited the RPC timeout for it.
// While no daemon answers, the client stops waiting for one: its calls
// answer from the fallback at once, and a timer asks the daemons (a
// cheap authenticated call) until one answers.
import { UnreachableError } from "./errors.js";
/** REPROBE_MS is how often a client no daemon answers asks again. */
export const REPROBE_MS = 1000;
/** Reach is the client's verdict on its daemons. */
export class Reach {
    o;
    isDown = false;
    timer;
    closed = false;
    /** Times every daemon went quiet (for tests). */
    losses = 0;
    constructor(o) {
        this.o = o;
    }
    /** down is true while no daemon answers: calls do not wait. */
    get down() {
        return this.isDown;
    }
    /** failed takes a call no daemon answered within the RPC timeout: the first makes the client down and says so. */
    failed(why) {
        if (this.isDown || this.closed)
            return;
        this.isDown = true;
        this.losses++;
        const every = this.o.reprobeMs ?? REPROBE_MS;
        this.o.onError(new UnreachableError(`no breakerd at ${this.o.urls} answers (${why.message}); answering from the local fallback and asking again every ${every} ms (client.check() rejects with the cause)`, why.causes));
        this.schedule();
    }
    /** answered takes any daemon's answer: the client is up again. */
    answered() {
        this.isDown = false;
        clearTimeout(this.timer);
        this.timer = undefined;
    }
    close() {
        this.closed = true;
        clearTimeout(this.timer);
    }
    schedule() {
        this.timer = setTimeout(() => {
            void this.o.probe().then((ok) => {
                if (ok)
                    this.answered();
                else if (this.isDown && !this.closed)
                    this.schedule();
            });
        }, this.o.reprobeMs ?? REPROBE_MS);
        this.timer.unref?.(); // never keeps the process alive
    }
}
