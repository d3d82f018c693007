"""The operator's unit tests' fixtures (the fakes are in :mod:`.fakes`)."""

from __future__ import annotations

import pytest

from .fakes import World


@pytest.fixture
def world() -> World:
    return World()
