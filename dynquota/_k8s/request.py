"""One request to the apiserver: timeout, error mapping and observation (I/O).

Every Kubernetes API call dynquota makes goes through one of these:

- :func:`call_api` — a kubernetes_asyncio generated method (``read_…``, ``patch_…``); the
  answer is what the method returns (a model, or a dict for custom objects).
- :func:`call_json` — a generated method sent with ``_preload_content=False``: the answer is
  the decoded JSON body (no model objects on a hot path).
- :func:`open_get` — a raw ``GET`` of a path with our own ``Accept`` header (metadata-only
  lists and watches, raw JSON lists): the caller reads (and releases) the open response.

Both send an ``aiohttp.ClientTimeout`` from :mod:`dynquota._k8s.timeouts` and put an
``asyncio.timeout`` backstop around the request, and both raise only
:mod:`dynquota._k8s.errors` types, the kubernetes_asyncio or aiohttp error chained as
``__cause__``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from dynquota._k8s import timeouts
from dynquota._k8s.errors import TransportError, error_from_response

__all__ = ["TRANSPORT_ERRORS", "ApiCallObserver", "call_api", "call_json", "open_get"]

ApiCallObserver = Callable[[str, str, int], None]
"""``(verb, resource, http_status)`` called after every API call (status 0: no answer)."""

TRANSPORT_ERRORS: Final = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError)
"""Exceptions of aiohttp and the stdlib that mean "no usable answer" on a raw request."""

T = TypeVar("T")


async def call_api(
    verb: str,
    resource: str,
    request: Callable[[aiohttp.ClientTimeout], Awaitable[T]],
    observer: ApiCallObserver | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> T:
    """Run one kubernetes_asyncio request with a timeout, translating its failures to
    dynquota's errors.

    ``request(t)`` must send its request with ``_request_timeout=t``; ``t`` is ``timeout``
    (default :func:`dynquota._k8s.timeouts.short_timeout`: 10 s total, 3 s connect). The
    whole call is also bounded by ``asyncio.timeout`` (the total plus 1 s), which covers what
    the ClientTimeout does not (e.g. refreshing credentials). ``observer`` (if any) hears
    ``(verb, resource, status)``: 200 on success, 0 when there was no answer.

    Raises:
        ApiError: (or a subclass by status) the apiserver refused the request.
        TransportError: connection, TLS or timeout failure.
    """
    client_timeout = timeout if timeout is not None else timeouts.short_timeout()
    try:
        async with asyncio.timeout(timeouts.deadline(client_timeout)):
            result = await request(client_timeout)
    except ApiException as exc:
        body = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
        error = error_from_response(int(exc.status or 0), body)
        if observer is not None:
            observer(verb, resource, error.status)
        raise error from exc
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        if observer is not None:
            observer(verb, resource, 0)
        raise TransportError(f"{verb} {resource}: {exc!r}") from exc
    if observer is not None:
        observer(verb, resource, 200)
    return result


async def call_json(
    verb: str,
    resource: str,
    request: Callable[[aiohttp.ClientTimeout], Awaitable[aiohttp.ClientResponse]],
    observer: ApiCallObserver | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> Any:
    """:func:`call_api` for a request sent with ``_preload_content=False`` (so
    kubernetes_asyncio returns the raw response): returns the decoded JSON body of a 2xx
    answer. The timeout and its backstop cover reading the body too.

    Raises:
        ApiError: (or a subclass by status) the apiserver refused the request.
        TransportError: connection, TLS or timeout failure, or a body that is not JSON.
    """

    async def send(t: aiohttp.ClientTimeout) -> bytes:
        response = await request(t)
        try:
            body = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            refused = ApiException(status=response.status, reason=response.reason)
            refused.body = body
            raise refused  # mapped by call_api like any other refusal
        return body

    body = await call_api(verb, resource, send, observer, timeout)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise TransportError(f"{verb} {resource}: malformed JSON") from exc


async def open_get(
    api_client: Any,
    path: str,
    query: Sequence[tuple[str, str]],
    accept: str,
    timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """``GET path?query`` with ``Accept: accept`` through ``api_client`` (a kubernetes_asyncio
    ``ApiClient``: its host, credentials and TLS); returns the open 200 response.

    The caller reads the body and releases the response (``close()`` to abandon a stream
    half-read). HTTP goes through ``ApiClient.call_api`` with ``_preload_content=False``:
    the generated list methods and the ``Watch`` helper force their own ``Accept`` header
    and build model objects, so they cannot ask for metadata only. The ``asyncio.timeout``
    backstop (``timeout``'s total plus 1 s) bounds the wait for the response head only.

    Raises:
        ApiError: (or a subclass by status) any answer but 200; the ``Status`` body decoded.
        TransportError: no answer (connection, TLS, timeout), or a request that could not be
            built.
    """
    try:
        async with asyncio.timeout(timeouts.deadline(timeout)):
            response: aiohttp.ClientResponse = await api_client.call_api(
                path,
                "GET",
                query_params=list(query),
                header_params={"Accept": accept},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
    except TRANSPORT_ERRORS as exc:
        raise TransportError(f"GET {path}: {exc!r}") from exc
    except ApiException as exc:  # raised only for requests it could not build
        raise TransportError(f"GET {path}: {exc}") from exc
    if response.status != 200:
        try:
            body = await response.read()
        except TRANSPORT_ERRORS:
            body = b""
        finally:
            response.release()
        raise error_from_response(response.status, body)
    return response
