"""What the client saved: the calls it refused in its own process and the
tools its runs left out, counted here and reported to breakerd in batches
(``ReportSavings``), which counts them with its own denials
(docs/operations.md, "What the breakers saved").

Counting is a dictionary update under a lock: it never waits on the
network. A thread sends the counts every interval; ``close`` sends what
is left. What no daemon could be reached for stays for the next report;
what a daemon refuses is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._errors import BreakerdError
from ._transport import Outage

# How often a client reports, in seconds (the Go client's
# DefaultSavingsInterval).
DEFAULT_SAVINGS_INTERVAL = 10.0
# The most reports one ReportSavings call may carry (breakerd's bound).
MAX_BATCH = 1024
# The largest count one report may carry (breakerd's bound); a larger
# tally goes out over several reports.
MAX_COUNT = 1_000_000
# The most breakers the unsent counts cover (while no daemon answers);
# counts for further breakers are not kept until a report goes out.
MAX_HELD = 10_000

Send = Callable[[list[dict[str, Any]]], object]


class Savings:
    """Savings holds what one worker saved since its last report, by
    breaker, and reports it through ``send`` (one ReportSavings call per
    batch). Safe for concurrent use."""

    def __init__(self, send: Send, interval: float) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._held: dict[str, list[int]] = {}  # breaker -> [local denials, tools removed]
        self.denials_reported = 0  # what breakerd took
        self.removed_reported = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.enabled = interval > 0
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, args=(interval,), name="breakerd-savings", daemon=True)
            self._thread.start()

    def add(self, breaker: str, denials: int = 0, removed: int = 0) -> None:
        """add counts what was saved on breaker."""
        if not self.enabled:
            return
        with self._lock:
            held = self._held.get(breaker)
            if held is None:
                if len(self._held) >= MAX_HELD:
                    return
                held = self._held[breaker] = [0, 0]
            held[0] += denials
            held[1] += removed

    def pending(self) -> dict[str, tuple[int, int]]:
        """pending is what is not reported yet: breaker -> (local denials,
        tools removed)."""
        with self._lock:
            return {b: (c[0], c[1]) for b, c in self._held.items()}

    def _take(self) -> list[dict[str, Any]]:
        """Removes and returns the next batch: at most MAX_BATCH breakers,
        each count at most MAX_COUNT (the rest stays for the next)."""
        batch: list[dict[str, Any]] = []
        with self._lock:
            for b, c in list(self._held.items()):
                if len(batch) == MAX_BATCH:
                    break
                d, r = min(c[0], MAX_COUNT), min(c[1], MAX_COUNT)
                c[0] -= d
                c[1] -= r
                if c == [0, 0]:
                    del self._held[b]
                batch.append({"breaker": b, "local_denials": str(d), "tools_removed": str(r)})
        return batch

    def _put_back(self, batch: list[dict[str, Any]]) -> None:
        for r in batch:
            self.add(r["breaker"], int(r["local_denials"]), int(r["tools_removed"]))

    def flush(self) -> bool:
        """flush sends everything held now. Returns True when nothing is
        left, False when no daemon answered (the batch is kept for the
        next report). A batch breakerd refuses is dropped and its error
        raised once the rest is sent."""
        refused: BreakerdError | None = None
        while batch := self._take():
            try:
                self._send(batch)
            except Outage:
                self._put_back(batch)
                return False
            except BreakerdError as e:
                refused = e
                continue
            with self._lock:
                self.denials_reported += sum(int(r["local_denials"]) for r in batch)
                self.removed_reported += sum(int(r["tools_removed"]) for r in batch)
        if refused is not None:
            raise refused
        return True

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.flush()
            except BreakerdError:
                pass  # dropped: a refusal does not get better by retrying

    def close(self) -> None:
        """close stops the reporting thread and sends what is left (best
        effort: what no daemon takes is lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.flush()
        except BreakerdError:
            pass
