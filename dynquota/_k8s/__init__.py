"""The low Kubernetes access layer: the one way dynquota talks to an apiserver (I/O).

Depends on nothing above it (only the standard library, aiohttp and kubernetes_asyncio), so
both the operator's adapters (:mod:`dynquota.kube`) and the admission library
(:mod:`dynquota.admission`) sit on it without depending on each other. Private: not an API
for users of dynquota; the contract that keeps it low is in ``pyproject.toml``
(``[tool.importlinter]``), see ``docs/architecture.md``.

- :mod:`~dynquota._k8s.timeouts` — the request timeouts of every call (10 s / 3 s, watches
  ``timeoutSeconds`` + 30 s, Lease requests 3 s).
- :mod:`~dynquota._k8s.errors` — the error tree (``ApiError`` by HTTP status, ``GoneError``
  also by reason ``Expired``/``Gone``, ``TransportError``) and the mapping of a ``Status``.
- :mod:`~dynquota._k8s.request` — one request: timeout, backstop, error mapping, observer.
- :mod:`~dynquota._k8s.paginate` — ``ListPage`` and the ``limit``/``continue`` loop.
- :mod:`~dynquota._k8s.watch` — the JSON-lines watch stream.
- :mod:`~dynquota._k8s.reflector` — list / watch / relist on 410 / backoff with jitter.
- :mod:`~dynquota._k8s.backoff` — exponential backoff with jitter.
- :mod:`~dynquota._k8s.workqueue` — the coalescing workqueue keyed by namespace.
"""
