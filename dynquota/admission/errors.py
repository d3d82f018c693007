"""Errors of the admission evaluator, in the shape kube-apiserver answers quota admission with.

Every error a request can be denied with derives from :class:`AdmissionError` and carries the
HTTP ``status`` code the apiserver would answer with (403 forbidden, 409 conflict, 500 internal
error, ...). Messages are stable and greppable; the quota ones follow upstream wording
(kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/
controller.go``, ``CheckRequest``): ``exceeded quota: NAME, requested: ..., used: ...,
limited: ...``.
"""

from __future__ import annotations

__all__ = [
    "AdmissionError",
    "DefaultDenyError",
    "InvalidObjectError",
    "QuotaAccessError",
    "QuotaConflictError",
    "QuotaForbiddenError",
    "QuotaScopeError",
    "QuotaTimeoutError",
]


class AdmissionError(Exception):
    """Base of every error a request is denied with.

    Attributes:
        status: the HTTP status code kube-apiserver would answer with.
        reason: the apiserver's ``Status.reason`` word (``Forbidden``, ``Conflict``, ...).
    """

    status: int = 500
    reason: str = "InternalError"


class QuotaForbiddenError(AdmissionError):
    """The request does not fit a quota (403), e.g. ``exceeded quota: ...``.

    ``str(err)`` is the full message the apiserver would return, like
    ``admission.NewForbidden``: ``pods "web-1" is forbidden: exceeded quota: q, requested:
    pods=1, used: pods=10, limited: pods=10`` (without the quoted name when the request has
    none). ``detail`` holds the part after ``is forbidden: ``.
    """

    status = 403
    reason = "Forbidden"

    def __init__(self, qualified_resource: str, name: str, detail: str) -> None:
        self.qualified_resource = qualified_resource
        self.name = name
        self.detail = detail
        if name:
            message = f'{qualified_resource} "{name}" is forbidden: {detail}'
        else:
            message = f"{qualified_resource} is forbidden: {detail}"
        super().__init__(message)


class QuotaScopeError(AdmissionError):
    """The object is in a scope the ``limitedResources`` configuration limits, and no quota
    of the namespace with that scope matches it (500, as upstream, which returns this error
    unwrapped: ``insufficient quota to match these scopes: [{PriorityClass In
    [cluster-services]}]``)."""


class InvalidObjectError(AdmissionError):
    """The admitted object cannot be measured (400), e.g. a malformed quantity in a container."""

    status = 400
    reason = "BadRequest"


class QuotaTimeoutError(AdmissionError):
    """No verdict before the request's deadline (500): the request is denied.

    Upstream answers ``Internal error occurred: resource quota evaluation timed out`` after a
    fixed 10 s (``quotaEvaluator.Evaluate``); this message keeps that phrase and adds the
    deadline and namespace: ``Internal error occurred: resource quota evaluation timed out
    after 10 s (namespace 'team-a'); the request is denied``. It is the only answer to a
    request whose deadline passed, whatever it was waiting for (the queue, a read, the fold,
    a write, a retry).
    """

    status = 500
    reason = "InternalError"


class DefaultDenyError(AdmissionError):
    """A waiter finished without a verdict (500); every waiter starts in this state.

    Upstream: ``defaultDeny`` in ``controller.go``. Seen only if the evaluation of its batch
    ended without deciding it (for example the evaluator was closed).
    """

    status = 500
    reason = "InternalError"

    def __init__(self, message: str = "DEFAULT DENY: quota evaluation did not decide") -> None:
        super().__init__(message)


class QuotaAccessError(AdmissionError):
    """Reading or writing a quota failed; ``status`` is the API's code (0 if none).

    A request denied with this error was not admitted; its charge was not written.
    """

    def __init__(self, message: str, status: int = 500, reason: str = "InternalError") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class QuotaConflictError(QuotaAccessError):
    """A quota status write lost a race (409): the quota's resourceVersion moved on."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409, reason="Conflict")
