"""Whether any daemon answers, told once, and re-probed in the background.

A daemon that refuses is gone at once; one that accepts and never
answers (hung) is gone once a call has waited the RPC timeout for it.
While no daemon answers, the client stops waiting for one: its calls
answer from the fallback at once, and a background thread asks the
daemons (a cheap authenticated call) until one answers. The loss and the
return are each logged once, on the ``breakerd`` logger.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("breakerd")

# How often a lost client asks the daemons again, in seconds.
REPROBE_INTERVAL = 1.0


class Reach:
    """Reach is the client's verdict on its daemons. ``probe`` makes one
    call and says whether a daemon answered. Safe for concurrent use."""

    def __init__(self, urls: str, probe: Callable[[], bool], interval: float = REPROBE_INTERVAL) -> None:
        self._urls = urls
        self._probe = probe
        self._interval = interval
        self._lock = threading.Lock()
        self._down = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.losses = 0  # times every daemon went quiet (tests read it)

    @property
    def down(self) -> bool:
        """down is True while no daemon answers: calls do not wait."""
        return self._down

    def failed(self, why: object) -> None:
        """failed takes a call that no daemon answered within its RPC
        timeout: the first makes the client down, says so and starts the
        re-probe."""
        with self._lock:
            if self._down or self._stop.is_set():
                return
            # Said before down shows: whoever sees the client down finds it said.
            log.warning("breakerd: no daemon at %s answers (%s); answering from the local fallback "
                        "and asking again every %gs (client.check() raises the cause)", self._urls, why, self._interval)
            self._down = True
            self.losses += 1
            self._thread = threading.Thread(target=self._reprobe, name="breakerd-reprobe", daemon=True)
            self._thread.start()

    def answered(self) -> None:
        """answered takes any daemon's answer: the client is up again."""
        if not self._down:
            return
        with self._lock:
            if self._down:
                log.warning("breakerd: a daemon at %s answers again; the local fallback stands down", self._urls)
            self._down = False

    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def _reprobe(self) -> None:
        while self._down and not self._stop.wait(self._interval):
            if self._probe():
                self.answered()
