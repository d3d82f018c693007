"""dynquota's own error types for Kubernetes API I/O.

Adapters in :mod:`dynquota.kube` translate kubernetes_asyncio and aiohttp failures into these,
so callers (the informers, the operator) handle one small hierarchy:

- :class:`ApiError` — the apiserver answered with a ``Status`` (HTTP error, or a watch
  ``ERROR`` event); subclasses by HTTP code: :class:`GoneError` (410, ``Expired``/``Gone``),
  :class:`ConflictError` (409), :class:`NotFoundError` (404), :class:`ForbiddenError`
  (401/403), :class:`TooManyRequestsError` (429); raised by dynquota itself, not the
  apiserver: :class:`NotOwnedError` (an object of a managed name that dynquota did not create:
  never written) and :class:`RetryConflictError` (a conditional write kept losing races).
- :class:`TransportError` — no usable answer: connection refused or reset, TLS failure,
  timeout, a stream cut mid-way, or a body that is not the JSON we asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ApiError",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "KubeError",
    "NotFoundError",
    "NotOwnedError",
    "RetryConflictError",
    "TooManyRequestsError",
    "TransportError",
    "error_from_response",
    "error_from_status",
    "redact_userinfo",
]


class KubeError(Exception):
    """Base of every error raised by :mod:`dynquota.kube`."""


_USERINFO = re.compile(r"(?<=://)[^/@\s'\"]*@")


def redact_userinfo(text: str) -> str:
    """``text`` with the user information of every URL in it (``http://user:password@proxy``,
    as a kubeconfig's ``proxy-url`` may carry; aiohttp puts the proxy's URL in its errors)
    replaced by ``***@``. Pure."""
    return _USERINFO.sub("***@", text)


class TransportError(KubeError):
    """The request got no usable answer (connection, TLS, timeout, truncated or bad body).
    Its message never holds a URL's credentials (:func:`redact_userinfo`)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_userinfo(message))


class ApiError(KubeError):
    """The apiserver refused the request with a ``Status``.

    Attributes: ``status`` (HTTP code, int; 0 when unknown), ``reason`` (the Status
    ``reason``, e.g. ``"Expired"``, ``"Conflict"``; may be empty), ``message`` (human text).
    """

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Whether repeating the same request later may succeed (429, 5xx, timeouts)."""
        return self.status in (0, 408, 429) or self.status >= 500


class GoneError(ApiError):
    """410 Gone / reason ``Expired``: the resourceVersion or continue token is too old."""


class ConflictError(ApiError):
    """409 Conflict: the object changed since it was read."""


class RetryConflictError(ConflictError):
    """409 Conflict on a write conditional on a read, where the operation redoes its read when
    repeated: unlike a bare 409, repeating the *operation* later may succeed, so
    ``retryable`` is true (the caller runs its pass again)."""

    @property
    def retryable(self) -> bool:
        """Always true: the operation re-reads before it writes again."""
        return True


class NotOwnedError(ApiError):
    """An object with a name dynquota manages exists but lacks dynquota's ownership labels
    (someone else created it): dynquota neither writes nor deletes it. Never retryable
    (``status`` 409, ``reason`` ``NotOwned``); the message names the object."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(
            409,
            "NotOwned",
            f"{kind} {name} exists without the labels dynquota puts on what it creates; "
            "dynquota will not take over an object it did not create (left untouched: "
            "delete or rename it to let dynquota write its own)",
        )
        self.kind = kind
        self.name = name


class NotFoundError(ApiError):
    """404 Not Found."""


class ForbiddenError(ApiError):
    """401 Unauthorized or 403 Forbidden (missing or wrong credentials or RBAC)."""


class TooManyRequestsError(ApiError):
    """429 Too Many Requests (API priority and fairness or max-inflight)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: ForbiddenError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    429: TooManyRequestsError,
}


def error_from_status(status: Mapping[str, Any], http_status: int | None = None) -> ApiError:
    """Build the matching :class:`ApiError` from a decoded ``meta/v1 Status`` object.

    ``http_status`` (the response code) is used when the Status carries no ``code``. A
    ``reason`` of ``Expired`` or ``Gone`` gives :class:`GoneError` whatever the code.
    """
    raw_code = status.get("code")
    code = int(raw_code) if isinstance(raw_code, int | str) and str(raw_code).isdigit() else 0
    if not code and http_status is not None:
        code = http_status
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    if reason in ("Expired", "Gone"):
        return GoneError(code or 410, reason, message)
    return _BY_STATUS.get(code, ApiError)(code, reason, message)


def error_from_response(http_status: int, body: bytes) -> ApiError:
    """Build an :class:`ApiError` from an error response (``http_status`` and raw ``body``).

    The body is decoded as a ``Status`` when it is one; otherwise its first 200 bytes become
    the message.
    """
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return error_from_status(decoded, http_status)
    text = body[:200].decode("utf-8", "replace")
    return _BY_STATUS.get(http_status, ApiError)(http_status, "", text)
