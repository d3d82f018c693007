"""kopf's thread warning is dropped for embedded operators (tests, the demo), nothing else."""

from __future__ import annotations

import logging

from dynquota.operator.runtime import _drop_thread_signal_warning


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord(
        "kopf._core.reactor.running", logging.WARNING, __file__, 1, message, None, None
    )


def test_only_the_thread_signal_warning_is_dropped() -> None:
    assert not _drop_thread_signal_warning(
        _record("OS signals are ignored: running not in the main thread.")
    )
    assert _drop_thread_signal_warning(
        _record("OS signals are ignored: can't add signal handler in Windows.")
    )
    assert _drop_thread_signal_warning(_record("Root tasks are stopped: finishing normally"))
