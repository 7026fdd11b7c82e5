"""The synchronous client: Allow, Record, Get, GetPolicy and guard."""

from __future__ import annotations

import dataclasses
import numbers
import os
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _otel
from . import _denial, _render
from ._cache import DEFAULT_HEARTBEAT, OpenCache
from ._denial import Denial
from ._errors import BreakerdError, CircuitOpen, ConfigError
from ._evidence import KIND_CANCELLED, Evidence, check_evidence, evidence_of
from ._fast import FAST_NOT_SENT, FastView, plain_success
from ._fallback import DENIED_PROBE, LocalBreaker, LocalDecision, LocalPolicy, counts
from ._guard import Exclude, Guard
from ._limits import DURATION_MS, WORKER_ID, Rule, check, check_name, check_names, check_tool, finite
from ._reach import Reach
from ._savings import DEFAULT_SAVINGS_INTERVAL, Savings
from ._transport import Outage, Transport

if TYPE_CHECKING:
    from ._aio import AsyncClient

# The budgets, in seconds (the Go client's defaults).
DEFAULT_ALLOW_BUDGET = 0.05
DEFAULT_FIRST_CONTACT_BUDGET = 1.0
DEFAULT_RPC_TIMEOUT = 2.0

_ALLOWING = ("DECISION_ALLOWED", "DECISION_PROBE")
# How many breakers the client remembers the last known state of.
MAX_KNOWN = 4096
# The threads that carry calls on past the caller's Allow budget: one per
# call outstanding, started only when none is idle. A daemon that hangs
# holds the thread of each call that found it (for that call's share of
# the RPC timeout), so the bound is well above the callers of one process:
# a call never queues behind calls waiting on a hung daemon.
_BACKGROUND_THREADS = 512


def default_worker_id() -> str:
    """default_worker_id is the host name and process id ("host-1234"),
    as the Go client's: quorum counts distinct worker ids, so two
    processes must not share one."""
    return f"{socket.gethostname()}-{os.getpid()}"


def states_of(ans: dict[str, Any]) -> list[dict[str, Any]]:
    """states_of returns the states of a BatchGet answer."""
    states = ans.get("states", [])
    return [s for s in states if isinstance(s, dict)] if isinstance(states, list) else []


def _lets_through(ans: dict[str, Any]) -> bool:
    """Whether an Allow answer is breakerd's ALLOWED (not a degraded daemon's)."""
    return ans.get("decision", "DECISION_ALLOWED") == "DECISION_ALLOWED" and not ans.get("degraded")


def _int(v: object) -> int:
    """An int64 of the proto3 JSON mapping (a string, or a number)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, str)):
        try:
            return int(v)
        except ValueError:
            return 0
    return 0


@dataclass(frozen=True)
class Permit:
    """Permit is Allow's answer. Pass it back to ``record``. ``allowed``
    says whether the call may go out; a denial carries ``tool_result``,
    the text the model reads in place of the tool's output."""

    breaker: str
    decision: str
    tool: str = ""
    ticket: dict[str, Any] = field(default_factory=dict)
    retry_after_ms: int = 0
    reason: str = ""
    scope: str = ""
    tool_result: str = ""
    degraded: bool = False
    state: dict[str, Any] = field(default_factory=dict)
    # Set when the local fallback admitted the call: its generation.
    local_generation: int | None = None
    # The daemon's ticket when its answer came after the fallback's.
    late: dict[str, Any] = field(default_factory=dict)
    # A denial's Denial: breakerd's, or the local fallback's.
    verdict: Denial | None = None
    # Fast mode's view answered (no round trip).
    fast: bool = False
    # breakerd answered from its own memory, its Redis away.
    daemon_degraded: bool = False
    # The client answered (its open cache, or fast mode's view).
    cached: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision in _ALLOWING

    @property
    def probe(self) -> bool:
        return self.decision == "DECISION_PROBE"

    def denial(self) -> CircuitOpen:
        """denial is the exception a denied call raises."""
        return CircuitOpen(
            breaker=self.breaker,
            decision=self.decision,
            reason=self.reason,
            retry_after_ms=self.retry_after_ms,
            tool_result=self.tool_result,
            tool=self.tool,
            scope=self.scope,
            alternatives=tuple(self.state.get("alternatives", ())),
            degraded=self.degraded,
            state=self.state,
            denial=self.verdict,
        )


# What record's own fields must be; the evidence's are check_evidence's.
_MESSAGE = Rule("a str", str)
_OUTCOME = Rule("an Outcome name (OUTCOME_SERVER_ERROR, ...) or None", (str, type(None)))


def check_record(permit: object, exc: object, evidence: object, latency_ms: object, deadline_ms: object,
                 message: object, outcome: object) -> None:
    """check_record raises for a Record the client will not send: a
    TypeError naming ``permit`` or ``exc`` when either is not what record
    takes, an InvalidArgument naming the field ("latency_ms",
    "evidence.http_status") for a value breakerd would refuse."""
    if not isinstance(permit, Permit):
        raise TypeError(f"permit: must be the Permit allow returned, got {type(permit).__name__}")
    if exc is not None and not isinstance(exc, BaseException):
        raise TypeError(f"exc: must be the exception the call raised, or None for a success, got {type(exc).__name__}")
    check("latency_ms", DURATION_MS, latency_ms)
    if deadline_ms is not None:
        check("deadline_ms", DURATION_MS, deadline_ms)
    check("message", _MESSAGE, message)
    check("outcome", _OUTCOME, outcome)
    if evidence is not None:
        check_evidence(evidence)


# The environment variables a client reads when given no address or token
# (docs/configuration.md, "The clients' environment").
ENV_URL, ENV_TOKEN = "BREAKERD_URL", "BREAKERD_TOKEN"


def from_environment(urls: str | Sequence[str] | None, token: str | None) -> tuple[str | Sequence[str], str | None]:
    """from_environment fills what the caller did not give: ``urls`` None
    from BREAKERD_URL (a ConfigError naming both when that is unset too),
    ``token`` None from BREAKERD_TOKEN. An empty token given is no token,
    whatever the environment holds."""
    if urls is None:
        urls = os.environ.get(ENV_URL, "")
        if not urls.strip():
            raise ConfigError(f"urls: none given, and {ENV_URL} is not set (docs/configuration.md#the-clients-environment)")
    if token is None:
        token = os.environ.get(ENV_TOKEN) or None
    return urls, token


def _strs(v: Any) -> bool:
    """Whether v is a sequence of str (a str alone is not)."""
    return not isinstance(v, (str, bytes)) and all(isinstance(s, str) for s in v)


# A duration of the client's own, in seconds.
_SECONDS = Rule("a finite number of seconds above 0", numbers.Real, lambda v: finite(v) and v > 0)

# OPTIONS is what each option of Client's constructor must be, by name:
# every one is checked before anything starts (check_options).
OPTIONS: dict[str, Rule] = {
    "urls": Rule("a URL, comma-separated URLs, a sequence of them, or None", (str, Sequence, type(None)),
                 lambda v: v is None or isinstance(v, str) or _strs(v)),
    "token": Rule("a str or None", (str, type(None))),
    # Refused here: the daemon refuses every call with it, and the
    # fallback would answer them all quietly meanwhile.
    "worker_id": Rule("None or 1 to 128 characters of A-Z a-z 0-9 . _ : @ / + = - (docs/security.md#worker-ids)",
                      (str, type(None)), lambda v: v is None or WORKER_ID.fullmatch(v) is not None),
    "allow_budget": _SECONDS,
    "first_contact_budget": _SECONDS,
    "rpc_timeout": _SECONDS,
    "tls": Rule("an ssl.SSLContext or None", (ssl.SSLContext, type(None))),
    "watch": Rule("True, False or a sequence of breaker names (a str alone would be read letter by letter)",
                  (bool, Sequence), lambda v: isinstance(v, bool) or _strs(v)),
    "clock": Rule("a callable returning seconds since the epoch", object, callable),
    "savings_interval": Rule("a finite number of seconds (0 or less: never)", numbers.Real, finite),
    "watch_heartbeat": _SECONDS,
    "fast": Rule("True or False", bool),
}


def check_options(options: Mapping[str, object]) -> None:
    """check_options raises ConfigError for the first option that breaks
    its rule in OPTIONS, the option's name first ("token: must be a str or
    None, got int")."""
    for name, v in options.items():
        why = OPTIONS[name].fault(v)
        if why:
            raise ConfigError(f"{name}: {why}")


class Client:
    """Client talks to breakerd over HTTP/JSON. ``urls`` is one daemon's
    base URL or several (a list, or comma-separated): calls fail over
    between them within the Allow budget. With no ``urls``, BREAKERD_URL
    gives them; with no ``token``, BREAKERD_TOKEN (``token=""``: none). ``watch`` follows the watch
    stream for the open cache: True for every breaker, a list of names for
    those only (a resumed stream then replays what it missed), False for
    no stream; ``watch_heartbeat`` is the stream's heartbeat interval to
    assume, in seconds, until the daemon announces one (a stream silent
    for three intervals is dropped and reconnected). ``savings_interval`` is how often, in seconds, the client
    reports what it saved (the denials its open cache answered, the tools
    its runs left out); 0 or less: never. Safe for concurrent use from
    threads; ``AsyncClient`` has the same methods for asyncio. ``fast``:
    fast mode (docs/python.md#fast-mode), a healthy breaker answered
    in-process from the watch stream's view. Every option is checked
    first (``OPTIONS``): one of the wrong type or out of its range raises
    ConfigError naming it, before any thread starts."""

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        *,
        token: str | None = None,
        worker_id: str | None = None,
        allow_budget: float = DEFAULT_ALLOW_BUDGET,
        first_contact_budget: float = DEFAULT_FIRST_CONTACT_BUDGET,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT,
        tls: ssl.SSLContext | None = None,
        watch: bool | Sequence[str] = True,
        clock: Callable[[], float] = time.time,
        savings_interval: float = DEFAULT_SAVINGS_INTERVAL,
        watch_heartbeat: float = DEFAULT_HEARTBEAT,
        fast: bool = False,
    ) -> None:
        check_options({k: v for k, v in locals().items() if k != "self"})  # every parameter, by name
        self.worker_id = worker_id or default_worker_id()
        self.allow_budget = allow_budget
        self.first_contact_budget = first_contact_budget
        self.rpc_timeout = max(rpc_timeout, allow_budget)
        self.clock = clock
        urls, token = from_environment(urls, token)
        # A daemon that did not answer is asked again on this client's clock.
        self.transport = Transport(urls, token=token, tls=tls, skip_after=allow_budget, backoff_clock=clock,
                                   probe=("BatchGet", {"breakers": [], "worker_id": self.worker_id}),
                                   probe_timeout=self.rpc_timeout)
        self.local = LocalBreaker(self._now_ms)
        names = [] if isinstance(watch, bool) else list(watch)
        # The denials this client knows, from every answer; the watch
        # stream, when followed, keeps them current.
        # Fast mode's view (docs/python.md#fast-mode): it follows the stream.
        self.fast = FastView(names) if fast else None
        self._fast_permits: dict[str, Permit] = {}  # the last permit the view answered, per breaker
        self.cache = OpenCache(self.transport, self._now_ms, names, start=bool(watch) or fast, heartbeat=watch_heartbeat,
                               worker_id=self.worker_id, fast=self.fast)
        self._lock = threading.Lock()
        self._contacted = False
        self._first_contact_spent = False  # the first-contact budget is spent once per client
        self._outage = False
        self._heard_at = float("-inf")  # when a daemon last answered (the transport's clock)
        # The breakers breakerd last said deny: (deny_until_ms, generation); see _learn.
        self._known: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._background = ThreadPoolExecutor(_BACKGROUND_THREADS, thread_name_prefix="breakerd-call")
        self.reach = Reach(", ".join(e.url for e in self.transport.endpoints), self._reprobe, clock)
        self._worked: set[str] = set()  # breakers whose credential worked here
        # What this client refused itself and its runs left out, until
        # reported (opened last: close ends it first).
        self.savings = Savings(self._report_savings, savings_interval)
        self._aio: AsyncClient | None = None  # made by the first async call (aio)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """close sends what the client saved since its last report (best
        effort), stops the watch stream and closes every connection."""
        self.savings.close()
        self.reach.close()
        self.cache.close()
        self._background.shutdown(wait=False, cancel_futures=True)
        if self._aio is not None:
            self._aio.transport.close()
        self.transport.close()

    @property
    def aio(self) -> AsyncClient:
        """aio is this client's AsyncClient: the same client, its calls
        awaited on the event loop's own sockets (what an ``async with``
        guard uses)."""
        if self._aio is None:
            from ._aio import AsyncClient

            with self._lock:
                if self._aio is None:
                    AsyncClient._wrap(self)
        assert self._aio is not None
        return self._aio

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def degraded(self) -> bool:
        """degraded is True while the client answers from what it last
        heard: no daemon answered its last call, or the watch stream it
        follows is not live."""
        return self._outage or self.cache.degraded

    # -- calls -------------------------------------------------------------

    def _budget(self, breaker: str) -> float:
        """How long allow waits for a daemon: the first-contact budget on
        the client's first call only; the RPC timeout at a breaker last
        known open whose probe is due (only a daemon can grant the one
        probe); else the Allow budget."""
        with self._lock:
            first, self._first_contact_spent = not self._first_contact_spent, True
            known = self._known.get(breaker)
        if first and not self._contacted:
            return max(self.allow_budget, self.first_contact_budget)
        if known is not None and known[0] <= self.cache.now_redis_ms():
            return self.rpc_timeout
        return self.allow_budget

    def _learn(self, st: object, allowed: bool = False) -> None:
        """Takes a breaker state from any daemon answer, in time or late:
        the open cache's view and the last known denial (bounded). A state
        breakerd says denies (its denial, or a deny_until_ms) is held until
        that deny-until, on the Redis clock, and its probe is due after it;
        one that does not deny leaves what was held (a breaker whose probe
        is due denies no more, yet was denying); an Allow breakerd answered
        ALLOWED (allowed) forgets it."""
        if not isinstance(st, dict) or not isinstance(st.get("breaker"), str):
            return
        self.cache.observe(st)
        name = st["breaker"]
        denial = st.get("denial")
        until = max(_int(st.get("deny_until_ms")), _int(denial.get("deny_until_ms")) if isinstance(denial, dict) else 0)
        with self._lock:
            held = self._known.get(name)
            if allowed or (held is None and not until and denial is None):
                self._known.pop(name, None)
                return
            self._known[name] = (until if until or held is None else held[0], _int(st.get("generation")))
            self._known.move_to_end(name)
            while len(self._known) > MAX_KNOWN:
                self._known.popitem(last=False)

    def _reprobe(self) -> bool:
        """One cheap authenticated call: did any daemon answer?"""
        try:
            self.transport.call("BatchGet", {"breakers": [], "worker_id": self.worker_id}, self.rpc_timeout)
        except Outage:
            return False
        except BreakerdError:
            pass  # refused, but a daemon answered
        self._heard_at = self.transport._clock()  # Reach says the client is up again
        return True

    def check(self) -> None:
        """check raises unless a breakerd daemon answers this client, with
        its token: BreakerdError naming the cause (no daemon reachable at
        any URL, not breakerd's API, a refused token). Call it at start to
        fail loudly where the fallback would answer quietly."""
        try:
            self.call("BatchGet", {"breakers": [], "worker_id": self.worker_id})
        except Outage as e:
            urls = ", ".join(ep.url for ep in self.transport.endpoints)
            raise BreakerdError(f"no breakerd answers at {urls}: {e} "
                                "(is the daemon's HTTP API on? go run ./cmd/breakerd --http-listen 127.0.0.1:7071)") from e

    def call(self, method: str, body: dict[str, Any], budget: float | None = None,
             started: float | None = None) -> dict[str, Any]:
        """call sends one BreakerService method (its JSON request body)
        and returns the JSON answer. Raises Outage when no daemon answered
        within budget (default: the RPC timeout) from started (the
        transport's clock; default: now)."""
        budget = budget if budget is not None else self.rpc_timeout
        began = self.transport._clock() if started is None else started
        try:
            out = self.transport.call(method, body, budget, began)
        except Outage as e:
            self._unanswered(e, budget, began)
            raise
        except BreakerdError:
            self._heard()  # a refusal is an answer
            raise
        self._answered()
        return out

    def _unanswered(self, e: Outage, budget: float, began: float) -> None:
        """Notes a call begun at began (the transport's clock) that no
        daemon answered within budget. A daemon that answered another
        call after this one began is there: this call's failure (a
        connection reset or closed under it, a stall it waited out) says
        nothing of now, and the client stays up."""
        if began < self._heard_at:
            return
        self._outage = True
        if budget >= self.rpc_timeout:
            self.reach.failed(e)  # no answer within the RPC timeout: gone, not slow

    def _heard(self) -> None:
        """Notes that a daemon answered (a refusal too): the client is up."""
        self._heard_at = self.transport._clock()
        self.reach.answered()

    def _answered(self) -> None:
        """Notes a call a daemon answered."""
        self._heard()
        if self._outage or not self._contacted:
            with self._lock:
                if self._outage:
                    self.local.reset()  # breakerd answers again: its state wins
                self._outage, self._contacted = False, True

    def allow(self, breaker: str, *, tool: str = "") -> Permit:
        """allow asks whether a call to breaker's dependency may go out.
        A denial is a Permit whose ``allowed`` is False (``guard`` raises
        CircuitOpen for it). The open cache answers a known denial with no
        round trip; when no daemon answers within the budget
        (``_budget``), the cache and then the local fallback answer,
        marked degraded, and a late answer still teaches the client (its
        ticket goes with the Record). While no daemon answers at all, the
        fallback answers at once. A name breakerd would refuse raises
        InvalidArgument before any of them. With OpenTelemetry installed
        the answer is recorded on the active span (docs/observability.md)."""
        p = self._allow(breaker, tool)
        _otel.decision(p)
        return p

    def _allow(self, breaker: str, tool: str) -> Permit:
        local = self._allow_here(breaker, tool)
        if local is not None:
            return local
        body = self._allow_body(breaker, tool)
        budget = self._budget(breaker)
        started = time.monotonic()  # the transport's clock: a daemon holding this call past the budget is passed over
        fut = self._background.submit(_otel.carry(self.call), "Allow", body, max(budget, self.rpc_timeout), started)
        try:
            ans = fut.result(timeout=budget)
        except FutureTimeout:
            self._outage = True  # until an answer, late or not, comes
            given = self._fallback_allow(breaker, tool)
            fut.add_done_callback(lambda f: self._late_allow(f, given))
            return given
        except Outage:
            return self._fallback_allow(breaker, tool)
        return self._allowed(breaker, tool, ans)

    def _allow_here(self, breaker: str, tool: str) -> Permit | None:
        """Checks the names, then answers what needs no round trip: a
        denial the open cache knows, the fallback's answer while no daemon
        answers at all; None: breakerd is asked."""
        if not (isinstance(breaker, str) and self.fast is not None and self.fast.used(breaker)):
            check_name("breaker", breaker)  # a name the view uses was checked then
        check_tool(tool)
        cached = self.cache.denial(breaker)
        if cached is not None:
            self.savings.add(breaker, denials=1)
            return self._cached_permit(breaker, tool, *cached, degraded=False)
        if self.fast is not None:
            self.fast.use(breaker)
            got = self.fast.allow(breaker, self.cache.live)
            if got is not None:
                return self._fast_permit(breaker, tool, *got)
        if self.reach.down:
            self.reach.poll()
            return self._fallback_allow(breaker, tool)
        return None

    def _fast_permit(self, breaker: str, tool: str, ticket: dict[str, Any], state: dict[str, Any]) -> Permit:
        """The permit of an Allow fast mode's view answered: one per
        breaker and tool while the view's word stands (a permit holds
        nothing of its call), made again when the view learns more."""
        p = self._fast_permits.get(breaker)
        if p is None or p.ticket is not ticket or p.state is not state or p.tool != tool:
            p = Permit(breaker=breaker, tool=tool, decision="DECISION_ALLOWED", ticket=ticket, state=state, fast=True, cached=True)
            self._fast_permits[breaker] = p  # at most one per breaker the view holds
        return p

    def _allow_body(self, breaker: str, tool: str) -> dict[str, Any]:
        body: dict[str, Any] = {"breaker": breaker, "worker_id": self.worker_id}
        if tool:
            body["tool"] = tool
        if not self.local.has_policy(breaker):
            body["with_policy"] = True  # the fallback's policy comes with the answer
        return body

    def _allowed(self, breaker: str, tool: str, ans: dict[str, Any]) -> Permit:
        """The permit of breakerd's Allow answer, learned from first (its
        as_of_ms is the clock the denial is rendered at)."""
        self._learn_answer(breaker, ans)
        return self._permit(breaker, tool, ans)

    def _learn_answer(self, breaker: str, ans: dict[str, Any]) -> None:
        """Keeps what a daemon's Allow answer tells of breaker: its state,
        and its policy (for the local fallback) when the request asked."""
        self._learn(ans.get("state"), allowed=_lets_through(ans))
        if isinstance(ans.get("policy"), dict):
            self._set_policy(breaker, ans["policy"])

    def _late_allow(self, fut: Future[dict[str, Any]], given: Permit) -> None:
        """Takes a daemon's Allow answer that came after the fallback's:
        what it says of the breaker is learned; its ticket goes with the
        Record of a call the fallback let out, and a probe lease the
        fallback's denial leaves unused is released at once."""
        try:
            ans = fut.result()
        except Exception:  # no daemon answered: call() said so
            return
        self._learn_answer(given.breaker, ans)
        ticket = ans.get("ticket")
        if not isinstance(ticket, dict):
            return
        if given.allowed:
            given.late["ticket"] = ticket
        elif ans.get("decision") == "DECISION_PROBE":
            body = {"breaker": given.breaker, "worker_id": self.worker_id, "ticket": ticket,
                    "evidence": {"error_kind": KIND_CANCELLED}}
            self._background.submit(self._send_record, body)

    def _send_record(self, body: dict[str, Any]) -> None:
        try:
            self._learn(self.call("Record", body).get("state"))
        except Exception:  # the evidence is the local fallback's too
            return

    def record(
        self,
        permit: Permit,
        exc: BaseException | None = None,
        *,
        evidence: Evidence | None = None,
        latency_ms: int = 0,
        deadline_ms: int | None = None,
        message: str = "",
        outcome: str | None = None,
    ) -> dict[str, Any]:
        """record reports what the permitted call did: the exception it
        raised (None for a success), read as evidence (``evidence_of``),
        or evidence given directly. breakerd classifies it and answers a
        RecordResponse (``counted``, ``classified_as``, ``why``). When no
        daemon answers, or the fallback admitted the call, the local
        fallback counts it, the answer is ``{"degraded": True}``, and the
        Record still goes to the daemons in the background (with the
        daemon's late ticket when one came): the fleet gets the evidence.
        ``outcome`` (an Outcome name) is sent instead of any evidence, and
        breakerd takes it as it is (a guard's excluded error is sent as
        EXCLUDED_OUTCOME)."""
        body, verdict, here = self._record_start(permit, exc, evidence, latency_ms, deadline_ms, message, outcome)
        if here is not None:
            return here
        try:
            ans = self.call("Record", body)
        except Outage:
            return self._record_unanswered(permit, verdict)
        return self._recorded(permit, verdict, ans)

    def _record_start(self, permit: Permit, exc: BaseException | None, evidence: Evidence | None, latency_ms: int,
                      deadline_ms: int | None, message: str,
                      outcome: str | None) -> tuple[dict[str, Any], bool | None, dict[str, Any] | None]:
        """The Record's body, the fallback's verdict on it, and the answer
        when it is the fallback's (the body then goes in the background),
        once check_record has taken the arguments (sync, async and guard
        alike)."""
        check_record(permit, exc, evidence, latency_ms, deadline_ms, message, outcome)
        ev = {} if outcome else dict(evidence) if evidence is not None else evidence_of(exc)
        verdict = None if outcome else counts(ev)  # a sent outcome is an excluded error's: ignored locally
        # Fast mode's view judges the permits it could have answered.
        fv = self.fast if permit.local_generation is None and not permit.late and not self.reach.down \
            and not permit.ticket.get("lease_token") else None
        if fv is not None and not outcome and plain_success(ev) \
                and fv.skip(permit.breaker, self._ticket(permit), latency_ms, self.cache.live):
            return {}, verdict, {"counted": False, "note": FAST_NOT_SENT}  # no body: nothing is sent
        body = self._record_body(permit, ev, latency_ms, deadline_ms, message)
        if outcome:
            del body["evidence"]
            body["outcome"] = outcome
        if fv is not None and verdict is True:
            fv.failed(permit.breaker, body["ticket"])  # its next successes must reach breakerd
        if permit.local_generation is not None or self.reach.down:
            self._record_locally(permit, verdict)
            self._background.submit(self._send_record, body)
            return body, verdict, {"degraded": True, "counted": verdict is True}
        return body, verdict, None

    def _record_unanswered(self, permit: Permit, verdict: bool | None) -> dict[str, Any]:
        self.local.record(permit.breaker, None, False, verdict)
        return {"degraded": True, "counted": verdict is True}

    def _recorded(self, permit: Permit, verdict: bool | None, ans: dict[str, Any]) -> dict[str, Any]:
        if verdict is False:
            self._worked.add(permit.breaker)
        self._learn(ans.get("state"))
        _otel.outcome(str(ans.get("classified_as", "")), bool(ans.get("counted")))
        return ans

    def _record_locally(self, permit: Permit, verdict: bool | None) -> None:
        if permit.local_generation is None:
            self.local.record(permit.breaker, None, False, verdict)
            return
        self.local.record(permit.breaker, permit.local_generation, permit.probe, verdict)
        if permit.probe and verdict is False:
            with self._lock:
                self._known.pop(permit.breaker, None)  # the local probe succeeded

    def _ticket(self, permit: Permit) -> dict[str, Any]:
        """The ticket a Record of permit carries: the daemon's late one,
        the permit's, or the generation last known of its breaker."""
        ticket = permit.late.get("ticket") or permit.ticket
        if not ticket:
            with self._lock:
                known = self._known.get(permit.breaker)
            ticket = {"generation": str(known[1] if known else 0)}
        return ticket

    def _record_body(self, permit: Permit, ev: Evidence, latency_ms: int, deadline_ms: int | None,
                     message: str) -> dict[str, Any]:
        ticket = self._ticket(permit)
        # The id makes the Record count once however often it is sent
        # (the next daemon tried, the background).
        body: dict[str, Any] = {"breaker": permit.breaker, "worker_id": self.worker_id, "ticket": ticket, "evidence": ev,
                                "record_id": os.urandom(16).hex()}
        if latency_ms:
            body["latency_ms"] = str(latency_ms)
        if deadline_ms is not None:
            body["deadline_ms"] = str(deadline_ms)
        elif "http_status" in ev or "grpc_status" in ev:
            ev["no_deadline"] = True
        if message:
            body["message"] = message
        if permit.breaker in self._worked:
            body["credential_worked"] = True
        return body

    def get(self, breaker: str) -> dict[str, Any]:
        """get returns one breaker's state (BreakerState as JSON)."""
        st = self.call("Get", {"breaker": breaker}).get("state", {})
        return st if isinstance(st, dict) else {}

    def batch_get(self, breakers: Sequence[str], budget: float | None = None) -> list[dict[str, Any]]:
        """batch_get returns several breakers' states in the order asked,
        this worker's own suspect verdict included. A str alone, or a name
        breakerd would refuse, raises InvalidArgument naming ``breakers``
        (``breakers[i]``), unsent."""
        return states_of(self.call("BatchGet", self._batch_body(breakers), budget))

    def _batch_body(self, breakers: object) -> dict[str, Any]:
        """A BatchGet's request, its names checked first."""
        return {"breakers": check_names("breakers", breakers), "worker_id": self.worker_id}

    def get_policy(self, breaker: str) -> dict[str, Any]:
        """get_policy returns the breaker's effective policy and which rule
        or default set each field (GetPolicyResponse as JSON)."""
        return self.call("GetPolicy", {"breaker": breaker})

    def flush_savings(self) -> bool:
        """flush_savings reports now what the client saved since its last
        report: the calls the open cache refused and the tools its runs
        left out (one ReportSavings call per 1,024 breakers). Returns
        False when no daemon answered: the counts stay for the next
        report. A report breakerd refuses (a breaker the token may not
        name) is dropped and its APIError raised."""
        return self.savings.flush()

    @property
    def saved_denials_reported(self) -> int:
        """The calls refused in this process that breakerd took."""
        return self.savings.denials_reported

    @property
    def tools_removed_reported(self) -> int:
        """The tools runs left out that breakerd took."""
        return self.savings.removed_reported

    def _report_savings(self, reports: list[dict[str, Any]]) -> None:
        self.transport.call("ReportSavings", {"worker_id": self.worker_id, "reports": reports}, self.rpc_timeout)

    def guard(self, breaker: str, *, tool: str = "", deadline: float | None = None, exclude: Exclude = None) -> Guard:
        """guard protects calls to breaker's dependency, as a decorator or
        a context manager, sync or async: Allow (a denial raises
        CircuitOpen), run the call, Record what it raised, re-raise.
        ``deadline`` is the call's budget in seconds, if it has one (a
        rate limit's wait is weighed against what is left of it).
        ``exclude`` names the errors that are not the dependency's fault
        (exception types or predicates, as pybreaker's): recorded as
        never counted. A name breakerd would refuse, or a deadline that is
        not a finite number, raises InvalidArgument here, when the guard
        is made (a decorator at import)."""
        return Guard(self, breaker, tool=tool, deadline=deadline, exclude=exclude)

    # -- answers -----------------------------------------------------------

    def _permit(self, breaker: str, tool: str, ans: dict[str, Any]) -> Permit:
        state = ans.get("state") if isinstance(ans.get("state"), dict) else {}
        ticket = ans.get("ticket") if isinstance(ans.get("ticket"), dict) else {}
        p = Permit(
            breaker=breaker,
            tool=tool,
            decision=str(ans.get("decision", "DECISION_UNSPECIFIED")),
            ticket=dict(ticket or {}),
            retry_after_ms=_int(ans.get("retry_after_ms")),
            reason=str(ans.get("reason", "")),
            scope=str(ans.get("scope", "")),
            tool_result=str(ans.get("tool_result", "")),  # a daemon that sends no Denial renders its own
            degraded=bool(ans.get("degraded", False)),
            daemon_degraded=bool(ans.get("degraded", False)),
            state=dict(state or {}),
        )
        d = Denial.of(ans.get("denial"))
        if p.allowed or d is None:
            return p
        return self._denied(p, d, self.cache.now_redis_ms())

    def _denied(self, p: Permit, d: Denial, now_ms: int) -> Permit:
        """p with the denial d, its words rendered at now_ms (the clock
        d's times are on)."""
        alternatives = [str(a) for a in p.state.get("alternatives", ()) or ()]
        parent = str(p.state.get("parent", "")) if d.scope_word == "parent" else ""
        return dataclasses.replace(
            p, decision=d.decision or p.decision, reason=d.reason, retry_after_ms=d.retry_after_ms(now_ms),
            scope=p.scope or parent, verdict=d,
            tool_result=_render.tool_result(d, p.tool or p.breaker, alternatives, p.degraded, now_ms))

    def _cached_permit(self, breaker: str, tool: str, st: dict[str, Any], d: Denial, degraded: bool) -> Permit:
        p = Permit(breaker=breaker, tool=tool, decision=d.decision, degraded=degraded, state=st, cached=True)
        return self._denied(p, d, self.cache.now_redis_ms())

    def _fallback_allow(self, breaker: str, tool: str) -> Permit:
        cached = self.cache.denial(breaker, stale_ok=True)
        if cached is not None:
            return self._cached_permit(breaker, tool, *cached, degraded=True)
        with self._lock:
            known = self._known.get(breaker)
        if known is not None:
            # Last known open, its probe due: one call of this client's
            # goes, the rest wait for its outcome.
            self.local.hold_open(breaker)
        return self._local_permit(breaker, tool, self.local.allow(breaker))

    def _fallback_peek(self, breaker: str) -> Permit | None:
        """The local fallback's denial of breaker now, if it has one (no
        probe slot taken)."""
        d = self.local.peek(breaker)
        return None if d is None else self._local_permit(breaker, "", d)

    def _local_permit(self, breaker: str, tool: str, d: LocalDecision) -> Permit:
        p = Permit(breaker=breaker, tool=tool, decision=d.decision, retry_after_ms=d.retry_after_ms,
                   degraded=True, state={"breaker": breaker}, local_generation=d.generation)
        if p.allowed:
            return p
        now = self.cache.now_redis_ms()  # the fallback's times, on the clock the daemon's denials are on
        until = d.until_ms + now - self._now_ms()
        return self._denied(p, _denial.fallback(d.decision, d.decision == DENIED_PROBE, until), now)

    def _set_policy(self, breaker: str, pol: object) -> None:
        known = {f: _int(pol[f]) for f in LocalPolicy.__dataclass_fields__ if isinstance(pol, dict) and _int(pol.get(f)) > 0}
        self.local.set_policy(breaker, LocalPolicy(**known))
