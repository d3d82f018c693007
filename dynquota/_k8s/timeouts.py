"""Request timeouts of every Kubernetes API call dynquota makes (the one place they are set).

kubernetes_asyncio sends a request with *no* timeout at all when ``_request_timeout`` is
unset, and turns a bare number into a *total* timeout (which would cut a watch stream that is
working as intended). So every call site passes an ``aiohttp.ClientTimeout`` built here:

- :func:`short_timeout` — get, list page, create, patch, delete, Events, policy status:
  ``total`` :data:`REQUEST_TIMEOUT` (10 s) and ``sock_connect`` :data:`CONNECT_TIMEOUT` (3 s).
- :func:`watch_timeout` — a watch asking the server for ``timeoutSeconds=N``: no total, a
  socket-read timeout of ``N + WATCH_READ_MARGIN`` (30 s: the server ends the stream after N
  seconds, and bookmarks or events arrive before that on a live connection), connect 3 s.
- :func:`lease_timeout` — Lease get/create/update of the leader elector: total
  :data:`LEASE_REQUEST_TIMEOUT` (3 s). Kept short because the lease duration must cover
  ``renew_deadline + retry_period + lease request timeout`` (see
  :mod:`dynquota.kube.leader_durations`); with client-go's 15/10/2 s that leaves 3 s.

The functions read the module constants when called, so a test can patch the constants.
:func:`deadline` gives the matching ``asyncio.timeout`` backstop (the ClientTimeout does not
cover what happens before the socket, such as refreshing credentials).
"""

from __future__ import annotations

import aiohttp

__all__ = [
    "CONNECT_TIMEOUT",
    "LEASE_REQUEST_TIMEOUT",
    "REQUEST_TIMEOUT",
    "WATCH_READ_MARGIN",
    "deadline",
    "lease_timeout",
    "short_timeout",
    "watch_timeout",
]

REQUEST_TIMEOUT = 10.0
"""Seconds one short request (connect, send, answer, body) may take in total."""
CONNECT_TIMEOUT = 3.0
"""Seconds to open a connection (TCP and TLS) to the apiserver."""
WATCH_READ_MARGIN = 30.0
"""Seconds a watch may stay silent beyond its ``timeoutSeconds`` before it is deemed dead."""
LEASE_REQUEST_TIMEOUT = 3.0
"""Seconds one Lease request of the leader elector may take in total."""
DEADLINE_MARGIN = 1.0
"""Seconds the ``asyncio.timeout`` backstop waits beyond the ClientTimeout's total."""


def short_timeout() -> aiohttp.ClientTimeout:
    """ClientTimeout of a short call: total :data:`REQUEST_TIMEOUT`, connect
    :data:`CONNECT_TIMEOUT` (seconds)."""
    return aiohttp.ClientTimeout(
        total=REQUEST_TIMEOUT, sock_connect=min(CONNECT_TIMEOUT, REQUEST_TIMEOUT)
    )


def lease_timeout(total: float | None = None) -> aiohttp.ClientTimeout:
    """ClientTimeout of a Lease request: total ``total`` (default
    :data:`LEASE_REQUEST_TIMEOUT`), connect at most :data:`CONNECT_TIMEOUT` (seconds)."""
    seconds = LEASE_REQUEST_TIMEOUT if total is None else total
    return aiohttp.ClientTimeout(total=seconds, sock_connect=min(CONNECT_TIMEOUT, seconds))


def watch_timeout(server_timeout_seconds: float) -> aiohttp.ClientTimeout:
    """ClientTimeout of a watch sent with ``timeoutSeconds=server_timeout_seconds``: no total,
    socket read ``server_timeout_seconds + WATCH_READ_MARGIN``, connect
    :data:`CONNECT_TIMEOUT` (seconds)."""
    return aiohttp.ClientTimeout(
        total=None,
        sock_connect=CONNECT_TIMEOUT,
        sock_read=server_timeout_seconds + WATCH_READ_MARGIN,
    )


def deadline(timeout: aiohttp.ClientTimeout) -> float | None:
    """Seconds for an ``asyncio.timeout`` around a request sent with ``timeout``: its total
    plus :data:`DEADLINE_MARGIN`, or ``None`` when it has no total (watches)."""
    return None if timeout.total is None else timeout.total + DEADLINE_MARGIN
