"""The uninstall cleanup's deadline, derived from the count (Pure)."""

from __future__ import annotations

import pytest

from dynquota.kube.cleanup import DEADLINE_MARGIN, deadline_for


def test_deadline_is_derived_from_the_count() -> None:
    assert deadline_for(5000, 20.0) == 250 + DEADLINE_MARGIN
    assert deadline_for(1, 0.5) == 2 + DEADLINE_MARGIN
    assert deadline_for(0, 20.0) == DEADLINE_MARGIN
    with pytest.raises(ValueError, match="qps must be positive"):
        deadline_for(10, 0)
