"""The unit tests' event loops: a test marked ``loop_clock`` runs on a loop clock
(:mod:`unit.loopclock`), every other one on asyncio's own loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest

from .loopclock import new_loop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.get_closest_marker("loop_clock") is not None:
        return {"loop_clock": new_loop}
    return {"asyncio": asyncio.new_event_loop}
