"""Start-up reads (kube-system, namespaces, policies) are retried with tenacity until they
succeed: a ``KubeError`` is logged with the wait before the next attempt; anything else
propagates at once."""

from __future__ import annotations

import pytest

from dynquota._k8s.errors import KubeError, NotFoundError, TransportError
from dynquota.operator.runtime import _until_it_succeeds


async def test_kube_errors_are_retried_with_growing_jittered_waits() -> None:
    failures: list[KubeError] = [
        TransportError("refused"),
        NotFoundError(404, "NotFound", "the server could not find the requested resource"),
        TransportError("reset"),
    ]
    logged: list[tuple[str, float]] = []
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    calls = 0
    async for attempt in _until_it_succeeds(
        lambda error, delay: logged.append((type(error).__name__, delay)), sleep=sleep
    ):
        with attempt:
            calls += 1
            if failures:
                raise failures.pop(0)
    assert calls == 4
    assert [name for name, _ in logged] == ["TransportError", "NotFoundError", "TransportError"]
    assert [delay for _, delay in logged] == slept
    # 1 s doubling, plus up to 1 s of jitter each
    assert [int(delay) for delay in slept] == [1, 2, 4]


async def test_other_errors_propagate_at_once() -> None:
    calls = 0

    async def sleep(seconds: float) -> None:
        raise AssertionError("no wait expected")

    async def read() -> None:
        nonlocal calls
        async for attempt in _until_it_succeeds(lambda error, delay: None, sleep=sleep):
            with attempt:
                calls += 1
                raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await read()
    assert calls == 1
