"""Load for the API Priority and Fairness benchmark: a churning client and a quiet one (I/O).

Both talk HTTP to kube-apiserver with a bearer token (aiohttp, the HTTP client under
kubernetes_asyncio; raw JSON, so the client's own CPU stays small next to the apiserver's), and
each runs in a process of its own (:func:`run_churn`, :func:`run_quiet` are picklable entry
points for a process pool), so the quiet client's latencies are not its event loop waiting
behind the churner's.

- **Churner** (:func:`churn`): ``workers`` coroutines, each creating a ConfigMap and deleting
  it again, without pause, until the run ends. On 429 it either honours ``Retry-After`` like
  client-go (``rest.Request``: sleep the header's seconds and send again, at most 10 retries,
  then give the request up) or retries at once, for as long as the run lasts (a client that
  ignores it).
- **Quiet client** (:func:`quiet`): creates at a fixed rate (open loop: each create starts at
  its scheduled time, whatever the earlier ones are doing, so a slow answer cannot hide the
  ones behind it), honouring ``Retry-After`` like client-go; its latency is from send to the
  final answer, retries included.

Every request has a 10 s timeout. Times are ``time.monotonic()`` seconds except ``start_at``
(``time.time()``, shared by the processes of one run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from dataclasses import dataclass, field

import aiohttp

__all__ = [
    "ChurnResult",
    "QuietResult",
    "Target",
    "churn",
    "quiet",
    "run_churn",
    "run_quiet",
]

REQUEST_TIMEOUT = 10.0
"""Seconds per request (each retry is a request)."""
CLIENT_GO_MAX_RETRIES = 10
"""client-go's ``rest.Request`` retries a 429 carrying ``Retry-After`` at most this often."""


@dataclass(frozen=True)
class Target:
    """Where and as whom: the apiserver URL, the PEM file of its CA, a bearer token."""

    server: str
    ca_file: str
    token: str


@dataclass
class ChurnResult:
    """What the churner achieved in ``seconds`` (wall, s): successful ``creates`` and
    ``deletes`` (writes finished before the run's end), 429 answers (``rejected``), requests
    given up after client-go's 10 retries (``gave_up``), other failures (``errors``: timeouts,
    5xx, connection errors) and the largest ``Retry-After`` seen (s)."""

    seconds: float
    creates: int = 0
    deletes: int = 0
    rejected: int = 0
    gave_up: int = 0
    errors: int = 0
    retry_after_max: float = 0.0

    @property
    def write_rate(self) -> float:
        """Successful writes (creates + deletes) per second."""
        return (self.creates + self.deletes) / self.seconds if self.seconds else 0.0


@dataclass
class QuietResult:
    """The quiet client's creates: ``latencies_ms`` of the successful ones (send to final
    answer, retries included; ms), 429 answers (``rejected``), failed creates (``errors``)."""

    latencies_ms: list[float] = field(default_factory=list)
    rejected: int = 0
    errors: int = 0


class _Client:
    """One aiohttp session to the apiserver with ``Target``'s token, a connection each worker."""

    def __init__(self, target: Target, connections: int) -> None:
        context = ssl.create_default_context(cafile=target.ca_file)
        self._session = aiohttp.ClientSession(
            target.server,
            connector=aiohttp.TCPConnector(limit=connections, ssl=context),
            headers={"Authorization": f"Bearer {target.token}"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
        )

    async def close(self) -> None:
        await self._session.close()

    async def send(self, method: str, path: str, body: object = None) -> tuple[int, float]:
        """One request; returns (HTTP status, Retry-After in s or 0); 0 status: no answer."""
        try:
            async with self._session.request(method, path, json=body) as resp:
                await resp.read()
                retry_after = resp.headers.get("Retry-After", "0")
                return resp.status, float(retry_after) if retry_after.isdigit() else 0.0
        except (aiohttp.ClientError, TimeoutError):
            return 0, 0.0


def _configmap(name: str, label: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"dynquota-bench": label}},
        "data": {"k": "v"},
    }


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Pace a client: return after ``seconds`` or as soon as ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


def _exists(path: str | None) -> bool:
    """A local stat (microseconds): whether ``path`` names an existing file."""
    return path is not None and os.path.exists(path)


async def _stop_at(stop: asyncio.Event, deadline: float, stop_file: str | None) -> None:
    """Set ``stop`` at the monotonic ``deadline`` or once ``stop_file`` exists (checked every
    0.2 s: another process's way to end the run early)."""
    while time.monotonic() < deadline:
        if _exists(stop_file):
            break
        await _wait_or_stop(stop, min(0.2, deadline - time.monotonic()))
    stop.set()


async def churn(
    target: Target,
    namespace: str,
    workers: int,
    seconds: float,
    honour_retry_after: bool,
    stop_file: str | None = None,
) -> ChurnResult:
    """Create and delete ConfigMaps in ``namespace`` from ``workers`` coroutines for
    ``seconds`` (or until ``stop_file`` exists), as described in the module docs."""
    client = _Client(target, workers + 2)
    stop = asyncio.Event()
    start = time.monotonic()
    end = start + seconds
    result = ChurnResult(seconds=seconds)
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    async def write(method: str, url: str, body: object, ok: int) -> bool:
        retries = 0
        while not stop.is_set():
            status, retry_after = await client.send(method, url, body)
            if status == ok:
                return time.monotonic() <= end
            if status != 429:
                result.errors += 1
                return False
            result.rejected += 1
            result.retry_after_max = max(result.retry_after_max, retry_after)
            if honour_retry_after:
                if retries == CLIENT_GO_MAX_RETRIES:
                    result.gave_up += 1
                    return False
                retries += 1
                await _wait_or_stop(stop, retry_after)
        return False

    async def worker(index: int) -> None:
        serial = 0
        while not stop.is_set():
            name = f"churn-{index}-{serial}"
            serial += 1
            if not await write("POST", path, _configmap(name, "churn"), 201):
                continue
            result.creates += 1
            if await write("DELETE", f"{path}/{name}", None, 200):
                result.deletes += 1

    stopper = asyncio.create_task(_stop_at(stop, end, stop_file))
    try:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    finally:
        stopper.cancel()
        await client.close()
    result.seconds = min(time.monotonic(), end) - start
    return result


async def quiet(target: Target, namespace: str, rate: float, seconds: float) -> QuietResult:
    """Create ConfigMaps in ``namespace`` at ``rate`` per second for ``seconds``, as described
    in the module docs; returns when every create has its final answer."""
    client = _Client(target, 16)
    result = QuietResult()
    stop = asyncio.Event()  # never set: a quiet create runs its retries to the end
    start = time.monotonic()

    async def create(index: int) -> None:
        sent = time.monotonic()
        body = _configmap(f"quiet-{os.getpid()}-{index}", "quiet")
        for _ in range(CLIENT_GO_MAX_RETRIES + 1):
            status, retry_after = await client.send(
                "POST", f"/api/v1/namespaces/{namespace}/configmaps", body
            )
            if status == 201:
                result.latencies_ms.append((time.monotonic() - sent) * 1000)
                return
            if status != 429:
                break
            result.rejected += 1
            await _wait_or_stop(stop, retry_after)
        result.errors += 1

    tasks = []
    try:
        for index in range(int(rate * seconds)):
            await _wait_or_stop(stop, start + index / rate - time.monotonic())
            tasks.append(asyncio.create_task(create(index)))
        await asyncio.gather(*tasks)
    finally:
        await client.close()
    return result


def _start(start_at: float) -> None:
    """Begin the load at the wall-clock ``start_at`` (s since the epoch), shared by the
    processes of one run, so churner and quiet client start together."""
    time.sleep(max(0.0, start_at - time.time()))  # a schedule both processes keep, no condition


def run_churn(
    target: Target,
    namespace: str,
    workers: int,
    seconds: float,
    honour_retry_after: bool,
    start_at: float,
    stop_file: str | None = None,
) -> ChurnResult:
    """:func:`churn` in its own event loop, from ``start_at``: a process pool's entry point."""
    _start(start_at)
    return asyncio.run(churn(target, namespace, workers, seconds, honour_retry_after, stop_file))


def run_quiet(
    target: Target, namespace: str, rate: float, seconds: float, start_at: float
) -> QuietResult:
    """:func:`quiet` in its own event loop, from ``start_at``: a process pool's entry point."""
    _start(start_at)
    return asyncio.run(quiet(target, namespace, rate, seconds))
