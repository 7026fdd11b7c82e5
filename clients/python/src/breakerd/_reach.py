"""Whether any daemon answers, told once, and re-probed in the background.

A daemon that refuses is gone at once; one that accepts and never
answers (hung) is gone once a call has waited the RPC timeout for it.
While no daemon answers, the client stops waiting for one: its calls
answer from the fallback at once, and the daemons are asked again (a
cheap authenticated call, in the background) on the Go client's
schedule: after ``backoff`` (1 s, doubling to 30 s), timed on the
client's clock. The loss and the return are each logged once, on the
``breakerd`` logger.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("breakerd")

# The back-off of a daemon (or of every daemon) that did not answer, in
# seconds: the Go client's (pkg/client/pick.go, hungBackoff).
BACKOFF, BACKOFF_MAX = 1.0, 30.0

# How often, in real seconds, the background re-probe reads the clock.
_TICK = 0.05


def backoff(strikes: int) -> float:
    """backoff is how long to wait after strikes failures in a row (1 s,
    doubling to 30 s)."""
    return float(min(BACKOFF * 2 ** min(max(strikes, 1) - 1, 5), BACKOFF_MAX))


class Reach:
    """Reach is the client's verdict on its daemons. ``probe`` makes one
    call and says whether a daemon answered; ``clock`` times the back-off.
    Safe for concurrent use."""

    def __init__(self, urls: str, probe: Callable[[], bool], clock: Callable[[], float]) -> None:
        self._urls = urls
        self._probe = probe
        self._clock = clock
        self._lock = threading.Lock()
        self._down = False
        self._strikes = 0
        self._due = 0.0  # the next re-probe, on clock
        self._probing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.losses = 0  # times every daemon went quiet (tests read it)
        self.probes = 0  # re-probes started (tests read it)

    @property
    def down(self) -> bool:
        """down is True while no daemon answers: calls do not wait."""
        return self._down

    @property
    def probing(self) -> bool:
        """probing is True while a re-probe is out."""
        return self._probing

    def failed(self, why: object) -> None:
        """failed takes a call that no daemon answered within its RPC
        timeout: the first makes the client down, says so and starts the
        re-probe."""
        with self._lock:
            if self._down or self._stop.is_set():
                return
            # Said before down shows: whoever sees the client down finds it said.
            log.warning("breakerd: no daemon at %s answers (%s); answering from the local fallback "
                        "and asking again after %gs, backing off to %gs (client.check() raises the cause)",
                        self._urls, why, BACKOFF, BACKOFF_MAX)
            self._strikes, self._due = 1, self._clock() + backoff(1)
            self._down = True
            self.losses += 1
            t = threading.Thread(target=self._reprobe, name="breakerd-reprobe", daemon=True)
            t.start()
            self._thread = t  # started: close joins it

    def answered(self) -> None:
        """answered takes any daemon's answer: the client is up again."""
        if not self._down:
            return
        with self._lock:
            if self._down:
                log.warning("breakerd: a daemon at %s answers again; the local fallback stands down", self._urls)
            self._down = False

    def poll(self) -> None:
        """poll starts a re-probe in the background when one is due (the
        background loop polls; so does each call while down)."""
        with self._lock:
            if not self._down or self._probing or self._stop.is_set() or self._clock() < self._due:
                return
            self._probing = True
            self.probes += 1
        threading.Thread(target=self._one, name="breakerd-reprobe-call", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def _one(self) -> None:
        ok = False
        try:
            ok = self._probe()
            if ok:
                self.answered()
        finally:
            with self._lock:
                if not ok:
                    self._strikes += 1
                    self._due = self._clock() + backoff(self._strikes)
                self._probing = False

    def _reprobe(self) -> None:
        while self._down and not self._stop.wait(_TICK):
            self.poll()
