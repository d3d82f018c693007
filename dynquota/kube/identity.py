"""Who the requests act as: the kubeconfig's impersonation fields and their flags (I/O: reads
the kubeconfig files).

client-go applies a kubeconfig user's ``as``, ``as-uid``, ``as-groups`` and ``as-user-extra``
to every request (``transport/round_trippers.go``, ``NewImpersonatingRoundTripper``: one
``Impersonate-User``, ``Impersonate-Uid``, one ``Impersonate-Group`` header per group, one
``Impersonate-Extra-<key>`` header per value); kubectl's ``--as``, ``--as-uid`` and
``--as-group`` override them (``k8s.io/cli-runtime`` ``ConfigFlags``). The Python clients
ignore those fields, so dynquota reads them here (:func:`kubeconfig_identity`) and sends them
through :class:`ImpersonatingApiClient`, a kubernetes_asyncio ``ApiClient`` whose
``request`` adds the headers: its ``default_headers`` is a plain dict (one value per name),
which cannot carry a header repeated per group.

:func:`load` is the one place the CLI and the operator read a kubeconfig: the files
(``--kubeconfig``, else ``$KUBECONFIG`` read now, ``:``-separated, else ``~/.kube/config``)
are merged as kubectl merges them, the context chosen (``--context`` or ``current-context``),
and a missing file is a :class:`KubeconfigMissingError` (kubernetes_asyncio would log a stray
``Config not found`` line first).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.config import kube_config
from multidict import CIMultiDict

__all__ = [
    "Identity",
    "IdentityError",
    "ImpersonatingApiClient",
    "KubeconfigMissingError",
    "header_key_escape",
    "kubeconfig_paths",
    "load",
    "read_kubeconfig",
]


class KubeconfigMissingError(Exception):
    """None of the kubeconfig files to be read exists; ``paths`` lists them, ``source`` says
    where the list came from (``--kubeconfig``, ``$KUBECONFIG``, the default)."""

    def __init__(self, paths: Sequence[str], source: str) -> None:
        super().__init__(f"kubeconfig not found: {os.pathsep.join(paths)} ({source})")
        self.paths = list(paths)
        self.source = source


class IdentityError(Exception):
    """An impersonation that cannot be sent as asked (the message says why)."""


@dataclass(frozen=True)
class Identity:
    """Whom every request impersonates: ``user`` (empty: nobody; the credentials' own
    identity), ``uid``, ``groups`` (in order) and ``extra`` (key -> values)."""

    user: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def impersonating(self) -> bool:
        """Whether any impersonation header is sent."""
        return bool(self.user or self.uid or self.groups or self.extra)

    def overridden(
        self, user: str | None = None, uid: str | None = None, groups: Sequence[str] | None = None
    ) -> Identity:
        """This identity with the flags given (``None``: not given) in place of the
        kubeconfig's fields, as kubectl's ``--as``, ``--as-uid`` and ``--as-group`` replace
        ``as``, ``as-uid`` and ``as-groups``."""
        changes: dict[str, Any] = {}
        if user is not None:
            changes["user"] = user
        if uid is not None:
            changes["uid"] = uid
        if groups is not None:
            changes["groups"] = tuple(groups)
        return replace(self, **changes)

    def check(self) -> None:
        """Raise :class:`IdentityError` for what kubectl refuses too: groups, a uid or extra
        fields without a user to impersonate (the apiserver would refuse every request)."""
        if not self.user and (self.uid or self.groups or self.extra):
            asked = [
                name
                for name, given in (
                    ("uid", self.uid),
                    ("groups", self.groups),
                    ("user-extra", self.extra),
                )
                if given
            ]
            raise IdentityError(
                f"impersonating {', '.join(asked)} needs a user to impersonate (--as, or "
                "`as` in the kubeconfig user)"
            )

    def headers(self) -> list[tuple[str, str]]:
        """The impersonation headers, in order (a name repeated per group or extra value;
        extra keys escaped as client-go does, :func:`header_key_escape`)."""
        out: list[tuple[str, str]] = []
        if self.user:
            out.append(("Impersonate-User", self.user))
        if self.uid:
            out.append(("Impersonate-Uid", self.uid))
        out += [("Impersonate-Group", g) for g in self.groups]
        for key, values in sorted(self.extra.items()):
            out += [(f"Impersonate-Extra-{header_key_escape(key)}", v) for v in values]
        return out


_TOKEN = frozenset(b"!#$&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
"""Bytes legal in an HTTP header name (RFC 7230 ``tchar``) but ``%``."""


def header_key_escape(key: str) -> str:
    """``key`` as client-go's ``headerKeyEscape`` writes an ``Impersonate-Extra-`` key
    (``transport/round_trippers.go``): every byte that is not legal in a header name, and
    ``%``, as ``%XX`` (upper-case hex) of its UTF-8 bytes. Pure."""
    return "".join(chr(b) if b in _TOKEN else f"%{b:02X}" for b in key.encode())


class ImpersonatingApiClient(client.ApiClient):
    """A kubernetes_asyncio ``ApiClient`` that sends :attr:`identity`'s impersonation headers
    with every request (generated methods, ``call_api``, watches: they all go through
    ``request``)."""

    def __init__(self, configuration: client.Configuration, identity: Identity) -> None:
        super().__init__(configuration=configuration)
        self.identity = identity

    async def request(
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: Mapping[str, str] | None = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ) -> Any:
        """``ApiClient.request`` with the impersonation headers added (a multidict: one line
        per group)."""
        sent: CIMultiDict[str] = CIMultiDict(headers or {})
        for name, value in self.identity.headers():
            sent.add(name, value)
        return await super().request(
            method,
            url,
            query_params=query_params,
            headers=sent,  # type: ignore[arg-type]  # aiohttp takes a multidict
            post_params=post_params,
            body=body,
            _preload_content=_preload_content,
            _request_timeout=_request_timeout,
        )


def kubeconfig_paths(kubeconfig: str | None) -> tuple[list[str], str]:
    """The kubeconfig files to merge and where the list came from: ``kubeconfig`` (the
    ``--kubeconfig`` path), else ``$KUBECONFIG`` as it is now (``:``-separated, empty entries
    skipped), else ``~/.kube/config``."""
    if kubeconfig:
        return [kubeconfig], "--kubeconfig"
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed, "$KUBECONFIG"
    return [(pathlib.Path.home() / ".kube" / "config").as_posix()], "the default location"


def _identity_of(user: Any) -> Identity:
    """The impersonation fields of a kubeconfig ``users[].user`` entry (a ConfigNode, a
    mapping or ``None``)."""
    value = getattr(user, "value", user)
    if not isinstance(value, Mapping):
        return Identity()
    extra_raw = value.get("as-user-extra") or {}
    if not isinstance(extra_raw, Mapping):
        raise IdentityError("the kubeconfig user's as-user-extra is not a mapping")
    extra = {
        str(k): tuple(str(v) for v in (vs if isinstance(vs, list) else [vs]))
        for k, vs in extra_raw.items()
    }
    groups = value.get("as-groups") or []
    if not isinstance(groups, list):
        raise IdentityError("the kubeconfig user's as-groups is not a list")
    return Identity(
        user=str(value.get("as") or ""),
        uid=str(value.get("as-uid") or ""),
        groups=tuple(str(g) for g in groups),
        extra=extra,
    )


def read_kubeconfig(kubeconfig: str | None, context: str | None) -> tuple[Any, Identity]:
    """The kubeconfig's loader (:func:`kubeconfig_paths`, merged; ``context`` or its
    ``current-context``) and the impersonation its user asks for (:class:`Identity`; empty
    when none). Reads the files (small: read synchronously).

    Raises :class:`KubeconfigMissingError` (no file exists), ``ConfigException`` (no such context),
    ``yaml.YAMLError`` (a file is not YAML), :class:`IdentityError` (malformed impersonation
    fields).
    """
    paths, source = kubeconfig_paths(kubeconfig)
    found = [p for p in paths if os.path.exists(os.path.expanduser(p))]
    if not found:
        raise KubeconfigMissingError(paths, source)
    merger = kube_config.KubeConfigMerger(os.pathsep.join(found))
    loader = kube_config.KubeConfigLoader(
        config_dict=merger.config, active_context=context, config_base_path=None
    )
    current = _plain(loader.current_context) or {}
    name = (_plain(current.get("context")) or {}).get("user")
    users = _plain((_plain(merger.config) or {}).get("users")) or []
    for entry in map(_plain, users):
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return loader, _identity_of(entry.get("user"))
    return loader, Identity()


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (``context`` or ``current-context``), as
    kubectl picks one when ``-n`` is not given: ``default`` when the context names none or no
    kubeconfig exists (in-cluster: the pod's own namespace).

    Raises what :func:`read_kubeconfig` raises, except :class:`KubeconfigMissingError`."""
    try:
        loader, _ = read_kubeconfig(kubeconfig, context)
    except KubeconfigMissingError:
        own = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return own.read_text().strip() if own.exists() else "default"
    current = _plain(loader.current_context) or {}
    return str((_plain(current.get("context")) or {}).get("namespace") or "default")


def _plain(node: Any) -> Any:
    """A kubernetes_asyncio ``ConfigNode``'s value (the node itself when it is none)."""
    return getattr(node, "value", node)


async def load(
    configuration: client.Configuration, kubeconfig: str | None, context: str | None
) -> Identity:
    """Load the kubeconfig (:func:`read_kubeconfig`) into ``configuration`` (server, TLS,
    credentials) and return the impersonation its user asks for.

    Raises what :func:`read_kubeconfig` raises, and ``ConfigException`` for unusable
    credentials.
    """
    loader, identity = read_kubeconfig(kubeconfig, context)
    await loader.load_and_set(configuration)
    return identity
