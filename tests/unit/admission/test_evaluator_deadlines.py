"""Request deadlines of the evaluator, on a virtual clock: one error whatever the phase.

Every test here runs on :class:`VirtualTimeLoop`, an event loop whose clock jumps to the next
timer whenever nothing is ready to run. Latencies (``asyncio.sleep`` in the in-memory server
and in the scripted accessor) take no wall time, so the outcome does not depend on how busy
the machine is, and times can be asserted exactly. A *stall* (:meth:`VirtualTimeLoop.stall`)
moves the clock forward while a callback runs, which is what a starved or preempted process
looks like to the event loop: when it runs again, several deadlines are overdue at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import selectors
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import pytest

from dynquota.admission import (
    DYNQUOTA,
    NAIVE,
    UPSTREAM,
    AdmissionAttributes,
    ConflictPolicy,
    Evaluator,
    GroupResource,
    InMemoryQuotaAccessor,
    InMemoryQuotaServer,
    ObjectCountEvaluator,
    QuotaAccessError,
    QuotaConflictError,
    QuotaTimeoutError,
    Registry,
    ResourceQuota,
)
from dynquota.admission.workqueue import NamespaceWork
from dynquota.quantity import Quantity

T = TypeVar("T")

WIDGETS = GroupResource("example.com", "widgets")
KEY = "count/widgets.example.com"
DEADLINE = 0.3


def timeout_message(ns: str = "ns") -> str:
    return (
        "Internal error occurred: resource quota evaluation timed out after 0.3 s "
        f"(namespace '{ns}'); the request is denied"
    )


# --- virtual time -----------------------------------------------------------------------


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on a virtual clock starting at 0.

    When no callback is ready, the loop asks its selector to wait until the next timer; the
    selector polls without blocking and moves the clock to that timer instead of waiting.
    Waiting with no timer at all would never end, so it raises instead (a deadlocked test
    fails at once rather than hanging).
    """

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def stall(self, seconds: float) -> None:
        """The running callback takes ``seconds`` (a starved or preempted process)."""
        self.advance(seconds)


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("virtual time: nothing can ever run again (deadlock)")
        self._loop.advance(timeout)
        return []


def run_virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` to completion on a fresh :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())


def now() -> float:
    return asyncio.get_running_loop().time()


def stall(seconds: float) -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    loop.stall(seconds)


def test_the_virtual_clock_jumps_to_the_next_timer() -> None:
    async def main() -> list[float]:
        seen = [now()]
        await asyncio.sleep(0.25)
        seen.append(now())
        stall(0.1)
        seen.append(now())
        await asyncio.sleep(0)
        seen.append(now())
        return seen

    assert run_virtual(main) == [0.0, 0.25, 0.35, 0.35]


def test_the_virtual_clock_refuses_to_wait_forever() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(main)


# --- the scripted accessor ----------------------------------------------------------------

Hook = Callable[[str], Awaitable[None]]
WriteHook = Callable[[ResourceQuota], Awaitable[None]]


class ScriptedAccessor(InMemoryQuotaAccessor):
    """The in-memory accessor, with hooks that run inside each read and write.

    Attributes:
        reads: the namespace of every read (informer or live), in order.
        on_read: awaited at the start of each read (namespace).
        on_write: awaited at the start of each status write (the quota to write).
    """

    def __init__(self, server: InMemoryQuotaServer, **options: Any) -> None:
        super().__init__(server, **options)
        self.reads: list[str] = []
        self.on_read: Hook | None = None
        self.on_write: WriteHook | None = None

    async def get_quotas(self, namespace: str) -> list[ResourceQuota]:
        self.reads.append(namespace)
        if self.on_read is not None:
            await self.on_read(namespace)
        return await super().get_quotas(namespace)

    async def get_quotas_live(self, namespace: str) -> list[ResourceQuota]:
        self.reads.append(namespace)
        if self.on_read is not None:
            await self.on_read(namespace)
        return await super().get_quotas_live(namespace)

    async def write_quota_status(self, quota: ResourceQuota) -> ResourceQuota:
        if self.on_write is not None:
            await self.on_write(quota)
        return await super().write_quota_status(quota)


async def hang(_: object) -> None:
    """Never answers (an apiserver that accepted the connection and went silent)."""
    await asyncio.Event().wait()


def late(then: Callable[[], None] = lambda: None) -> Callable[[object], Awaitable[None]]:
    """Takes 0.25 s, then the process is starved for 0.1 s (past the 0.3 s deadline), then
    ``then()`` runs (raise to fail the call; return to let it succeed)."""

    async def hook(_: object) -> None:
        await asyncio.sleep(0.25)
        stall(0.1)
        then()

    return hook


def raise_(error: Exception) -> Callable[[], None]:
    def fail() -> None:
        raise error

    return fail


class StallingCountEvaluator(ObjectCountEvaluator):
    """Counts widgets; measuring the first one starves the process for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(WIDGETS)
        self.seconds = seconds
        self.calls = 0

    def usage(self, obj: Mapping[str, Any], now: float) -> dict[str, Quantity]:
        self.calls += 1
        if self.calls == 1:
            stall(self.seconds)
        return super().usage(obj, now)


# --- helpers ----------------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    """What the caller of ``evaluate`` got, and when (virtual seconds)."""

    error: BaseException | None
    at: float


def widget(ns: str = "ns", i: int = 0) -> AdmissionAttributes:
    return AdmissionAttributes(namespace=ns, resource=WIDGETS, object={}, name=f"w-{i}")


async def ask(evaluator: Evaluator, attributes: AdmissionAttributes) -> Answer:
    try:
        await evaluator.evaluate(attributes)
    except Exception as e:
        return Answer(e, now())
    return Answer(None, now())


async def ask_all(evaluator: Evaluator, requests: Iterable[AdmissionAttributes]) -> list[Answer]:
    return list(await asyncio.gather(*(ask(evaluator, a) for a in requests)))


def used(server: InMemoryQuotaServer, ns: str = "ns", name: str = "q") -> str:
    return str(server.get(ns, name).used[KEY])


def assert_timed_out(answer: Answer, at: float, ns: str = "ns") -> None:
    assert type(answer.error) is QuotaTimeoutError
    assert answer.error.status == 500
    assert answer.error.reason == "InternalError"
    assert str(answer.error) == timeout_message(ns)
    assert answer.at == pytest.approx(at, abs=1e-9)


POLICIES = [DYNQUOTA, UPSTREAM, NAIVE]
BATCHING = [DYNQUOTA, UPSTREAM]


def by_name(policy: ConflictPolicy) -> str:
    return policy.name


# --- conflicts until the deadline (the load-dependent failure) ------------------------------

RETRY_INSIDE_THE_BATCH = dataclasses.replace(
    DYNQUOTA, name="dynquota-no-requeue", requeue_on_conflict=False
)


@pytest.mark.parametrize("policy", [DYNQUOTA, RETRY_INSIDE_THE_BATCH], ids=by_name)
def test_conflicts_are_retried_only_until_the_deadline(policy: ConflictPolicy) -> None:
    """Every write conflicts; each takes 8 ms to be refused (the precondition is checked
    halfway through a 16 ms write). 37 are refused by 0.296 s; the 38th is still in flight
    at the 0.3 s deadline, which denies the request with the timeout error."""

    async def main() -> tuple[Answer, Evaluator, InMemoryQuotaServer]:
        server = InMemoryQuotaServer(write_latency=0.016)
        server.create("ns", "q", {KEY: 5})
        server.conflict_before_next_writes("ns", "q", times=10**6)
        async with Evaluator(InMemoryQuotaAccessor(server), deadline=DEADLINE, policy=policy) as ev:
            answer = await ask(ev, widget())
        return answer, ev, server

    answer, ev, server = run_virtual(main)
    assert_timed_out(answer, at=0.3)
    assert server.stats.conflicts == 37
    assert server.stats.status_writes == 0
    assert used(server) == "0"
    assert (ev.stats.timeouts, ev.stats.late_charges) == (1, 0)


def test_a_caller_preempted_right_after_queueing_gets_the_timeout_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tester's failure, made deterministic: the process is preempted for 5 ms between
    queueing the request and arming the caller's timer. The batch's own deadline then came
    first, and its write was cut with ``QuotaAccessError('writing the status of quota ns/q
    did not finish before the request deadline')``. Both now use the request's deadline and
    deny with the same error."""
    add_work = NamespaceWork.add

    def preempted(self: NamespaceWork, waiter: Any) -> None:
        add_work(self, waiter)
        stall(0.005)

    monkeypatch.setattr(NamespaceWork, "add", preempted)

    async def main() -> tuple[Answer, InMemoryQuotaServer]:
        server = InMemoryQuotaServer(write_latency=0.016)
        server.create("ns", "q", {KEY: 5})
        server.conflict_before_next_writes("ns", "q", times=10**6)
        async with Evaluator(InMemoryQuotaAccessor(server), deadline=DEADLINE) as ev:
            answer = await ask(ev, widget())
        return answer, server

    answer, server = run_virtual(main)
    assert_timed_out(answer, at=0.3)  # the deadline counts from arrival, not from the timer
    assert server.stats.conflicts == 36  # the stall took 5 of the 300 ms
    assert used(server) == "0"


# --- one error, whatever the phase --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Phase:
    """Where the deadline passes, and what the store looks like afterwards."""

    name: str
    on_read: Hook | None = None
    on_write: WriteHook | None = None
    stall_in_fold: float = 0.0
    answered_at: float = 0.3
    status_writes: int = 0
    late_charges: int = 0


PHASES = [
    Phase("read-hangs", on_read=hang),
    Phase("read-returns-after-the-deadline", on_read=late(), answered_at=0.35),
    Phase(
        "read-fails-after-the-deadline",
        on_read=late(raise_(QuotaAccessError("apiserver unavailable", 503))),
        answered_at=0.35,
    ),
    Phase("fold-outlives-the-deadline", stall_in_fold=0.35, answered_at=0.35),
    Phase("write-hangs", on_write=hang),
    Phase(
        "write-lands-after-the-deadline",
        on_write=late(),
        answered_at=0.35,
        status_writes=1,
        late_charges=1,
    ),
    Phase(
        "write-fails-after-the-deadline",
        on_write=late(raise_(QuotaAccessError("etcdserver: request timed out", 500))),
        answered_at=0.35,
    ),
    Phase(
        "write-conflicts-after-the-deadline",
        on_write=late(raise_(QuotaConflictError("the object has been modified"))),
        answered_at=0.35,
    ),
]


@pytest.mark.parametrize("policy", POLICIES, ids=by_name)
@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
def test_a_deadline_passing_in_any_phase_is_the_timeout_error(
    phase: Phase, policy: ConflictPolicy
) -> None:
    async def main() -> tuple[Answer, Evaluator, InMemoryQuotaServer, ScriptedAccessor]:
        server = InMemoryQuotaServer()
        server.create("ns", "q", {KEY: 5})
        accessor = ScriptedAccessor(server)
        accessor.on_read = phase.on_read
        accessor.on_write = phase.on_write
        registry = Registry([StallingCountEvaluator(phase.stall_in_fold)])
        async with Evaluator(accessor, deadline=DEADLINE, policy=policy, registry=registry) as ev:
            answer = await ask(ev, widget())
        return answer, ev, server, accessor

    answer, ev, server, accessor = run_virtual(main)
    assert_timed_out(answer, at=phase.answered_at)
    assert accessor.reads == ["ns"]  # no retry after the deadline
    assert server.stats.status_writes == phase.status_writes
    assert used(server) == str(phase.status_writes)  # only a write already in flight lands
    assert (ev.stats.timeouts, ev.stats.late_charges) == (1, phase.late_charges)


def test_the_deadline_expires_during_a_write_that_never_answers() -> None:
    """The write is in flight at the deadline: the caller is answered at that instant with
    the timeout error (not the write's fate, not an access error), and nothing is stored."""

    async def main() -> tuple[Answer, Evaluator, InMemoryQuotaServer, list[float]]:
        server = InMemoryQuotaServer()
        server.create("ns", "q", {KEY: 5})
        accessor = ScriptedAccessor(server)
        writes_started: list[float] = []

        async def hang_after_100ms(_: ResourceQuota) -> None:
            writes_started.append(now())
            await asyncio.sleep(0.1)
            await hang(None)

        accessor.on_write = hang_after_100ms
        async with Evaluator(accessor, deadline=DEADLINE) as ev:
            answer = await ask(ev, widget())
        return answer, ev, server, writes_started

    answer, ev, server, writes_started = run_virtual(main)
    assert writes_started == [0.0]
    assert type(answer.error) is QuotaTimeoutError
    assert str(answer.error) == (
        "Internal error occurred: resource quota evaluation timed out after 0.3 s "
        "(namespace 'ns'); the request is denied"
    )
    assert answer.at == pytest.approx(0.3, abs=1e-9)
    assert (server.stats.status_writes, used(server)) == (0, "0")
    assert (ev.stats.timeouts, ev.stats.late_charges) == (1, 0)


@pytest.mark.parametrize("policy", BATCHING, ids=by_name)
def test_a_request_whose_deadline_passes_in_the_queue_is_never_read(
    policy: ConflictPolicy,
) -> None:
    """One worker; the batch ahead of the request starves the process past both deadlines
    during its write (which lands). The worker then takes the request at once, before its
    caller's timer runs: it is denied without reading its quotas."""

    async def main() -> tuple[list[Answer], Evaluator, InMemoryQuotaServer, ScriptedAccessor]:
        server = InMemoryQuotaServer()
        server.create("busy", "q", {KEY: 5})
        server.create("ns", "q", {KEY: 5})
        accessor = ScriptedAccessor(server)

        async def slow_for_busy(quota: ResourceQuota) -> None:
            if quota.namespace == "busy":
                await asyncio.sleep(0.1)
                stall(0.3)

        accessor.on_write = slow_for_busy
        async with Evaluator(accessor, workers=1, deadline=DEADLINE, policy=policy) as ev:
            answers = await ask_all(ev, [widget("busy"), widget("ns")])
        return answers, ev, server, accessor

    answers, ev, server, accessor = run_virtual(main)
    assert_timed_out(answers[0], at=0.4, ns="busy")  # its write landed after its deadline
    assert_timed_out(answers[1], at=0.4, ns="ns")
    assert accessor.reads == ["busy"]
    assert (used(server, "busy"), used(server, "ns")) == ("1", "0")
    assert (ev.stats.timeouts, ev.stats.late_charges) == (2, 1)


@pytest.mark.parametrize("policy", BATCHING, ids=by_name)
def test_a_verdict_reached_in_time_but_delivered_after_the_deadline_is_the_timeout(
    policy: ConflictPolicy,
) -> None:
    """Room for one: in one batch the first request is charged and the second denied
    (exceeded quota) at fold time, well before the deadline; the write of the first lands
    after the deadline, so both are answered after it, with the timeout error. Upstream
    releases the waiters of a batch together when its writes end, too."""

    async def main() -> tuple[list[Answer], Evaluator, InMemoryQuotaServer]:
        server = InMemoryQuotaServer()
        server.create("ns", "q", {KEY: 1})
        accessor = ScriptedAccessor(server)
        accessor.on_write = late()
        async with Evaluator(accessor, deadline=DEADLINE, policy=policy) as ev:
            answers = await ask_all(ev, [widget(i=1), widget(i=2)])
        return answers, ev, server

    answers, ev, server = run_virtual(main)
    assert_timed_out(answers[0], at=0.35)
    assert_timed_out(answers[1], at=0.35)
    assert ev.stats.batches == 1
    assert server.stats.status_writes == 1
    assert used(server) == "1"
    assert (ev.stats.timeouts, ev.stats.late_charges) == (2, 1)


@pytest.mark.parametrize("policy", POLICIES, ids=by_name)
def test_a_verdict_delivered_before_the_deadline_stands(policy: ConflictPolicy) -> None:
    async def main() -> tuple[Answer, Evaluator, InMemoryQuotaServer]:
        server = InMemoryQuotaServer()
        server.create("ns", "q", {KEY: 5})
        accessor = ScriptedAccessor(server)

        async def slow(_: ResourceQuota) -> None:
            await asyncio.sleep(0.299)

        accessor.on_write = slow
        async with Evaluator(accessor, deadline=DEADLINE, policy=policy) as ev:
            answer = await ask(ev, widget())
        return answer, ev, server

    answer, ev, server = run_virtual(main)
    assert answer == Answer(None, pytest.approx(0.299, abs=1e-9))
    assert used(server) == "1"
    assert (ev.stats.timeouts, ev.stats.late_charges) == (0, 0)


def test_default_deny_at_the_deadline_and_never_charged_later() -> None:
    """A request timed out while its read hangs is never charged; the next one is."""

    async def main() -> tuple[list[Answer], Evaluator, InMemoryQuotaServer]:
        server = InMemoryQuotaServer()
        server.create("ns", "q", {KEY: 5})
        accessor = ScriptedAccessor(server)
        accessor.read_gate = asyncio.Event()
        async with Evaluator(accessor, deadline=DEADLINE) as ev:
            first = await ask(ev, widget(i=1))
            accessor.read_gate.set()
            second = await ask(ev, widget(i=2))
        return [first, second], ev, server

    (first, second), ev, server = run_virtual(main)
    assert_timed_out(first, at=0.3)
    assert second == Answer(None, pytest.approx(0.3, abs=1e-9))
    assert ev.stats.timeouts == 1
    assert server.stats.status_writes == 1
    assert used(server) == "1"
