"""Toxiproxy between a client and the local apiserver: transport faults on demand.

Used by the fault tests and the chaos soak; never imported by the operator. The server binary
(``github.com/Shopify/toxiproxy/v2/cmd/server``, named ``server``) comes from
``hack/toxiproxy/build.sh`` (``go install`` from the Go module proxy, cached outside the
repository by version) or from ``$DYNQUOTA_TOXIPROXY_ASSETS``.

Toxiproxy forwards TCP: the operator's TLS session with kube-apiserver passes through it
unchanged (the serving certificate covers ``127.0.0.1``, the proxy's address), so it can delay,
throttle, reset, hang or refuse connections, never answer an HTTP status. Its HTTP API is a few
JSON requests, made here with the standard library.

Fault kinds (:data:`TRANSPORT_FAULTS`), each applied by :meth:`Proxy.fault`:

=============  ================================================================================
``latency``    every chunk from the apiserver is held ``latency_ms`` (default 2000 ms)
``reset``      a TCP RST on every connection as soon as either side sends (``reset_peer``)
``down``       the proxy is disabled: open connections are closed, new ones refused
``hang``       half-open: connections stay up but no byte passes either way (``timeout`` 0)
``bandwidth``  the apiserver's answers limited to ``rate_kb`` KB/s (default 4)
=============  ================================================================================
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from dynquota.testing import processes

__all__ = [
    "TRANSPORT_FAULTS",
    "Proxy",
    "Toxiproxy",
    "ToxiproxyError",
    "TransportFault",
    "find_toxiproxy",
]

ASSETS_ENV: Final = "DYNQUOTA_TOXIPROXY_ASSETS"
TransportFault = Literal["latency", "reset", "down", "hang", "bandwidth"]
TRANSPORT_FAULTS: Final[tuple[TransportFault, ...]] = (
    "latency",
    "reset",
    "down",
    "hang",
    "bandwidth",
)


class ToxiproxyError(RuntimeError):
    """The Toxiproxy server failed to build or start, or its API refused a request (the
    message has its status and answer)."""


def find_toxiproxy() -> Path:
    """Return the path of the Toxiproxy ``server`` binary, building it when missing.

    Uses ``$DYNQUOTA_TOXIPROXY_ASSETS/server`` when executable; otherwise runs
    ``hack/toxiproxy/build.sh`` from this source tree (about a minute cold).

    Raises:
        ToxiproxyError: no binary and no build script, or the build failed.
    """
    assets = processes.build_assets(
        "toxiproxy",
        ToxiproxyError,
        ASSETS_ENV,
        lambda d: os.access(d / "server", os.X_OK),
        f"Toxiproxy not found: set {ASSETS_ENV} to a directory holding its `server` binary",
    )
    return assets / "server"


@dataclass
class Toxiproxy:
    """The Toxiproxy server as a child process, its API on ``127.0.0.1`` on a free port.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. The process gets
    SIGKILL when the launching process dies (like the control plane's components).

    Args:
        binary: the ``server`` binary (default: :func:`find_toxiproxy`).
        log_path: where its output goes (default: discarded).
    """

    binary: Path | None = None
    log_path: Path | None = None
    api_url: str = field(init=False, default="")
    _proc: subprocess.Popen[bytes] | None = field(init=False, default=None)

    def __enter__(self) -> Toxiproxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until its API answers ``/version``.

        Raises:
            ToxiproxyError: it exited or did not answer within ``timeout`` seconds.
        """
        if self.binary is None:
            self.binary = find_toxiproxy()
        port = processes.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = processes.spawn(
                [str(self.binary), "-host", "127.0.0.1", "-port", str(port)], out
            )
        finally:
            if not isinstance(out, int):
                out.close()
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise ToxiproxyError(f"toxiproxy exited with {self._proc.returncode}")
            with contextlib.suppress(OSError, ToxiproxyError):
                self._call("GET", "/version")
                return
            if time.monotonic() >= deadline:
                self.stop()
                raise ToxiproxyError(f"toxiproxy API {self.api_url} not up after {timeout} s")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); idempotent. Every proxied
        connection is closed."""
        proc, self._proc = self._proc, None
        processes.stop(proc)

    def proxy(self, name: str, upstream: str, listen_port: int | None = None) -> Proxy:
        """Create (or replace) proxy ``name`` listening on ``127.0.0.1:listen_port`` (default:
        a free port) and forwarding to ``upstream`` (``host:port``); returns it, enabled and
        without toxics.

        Raises:
            ToxiproxyError: the API refused (e.g. the port is taken).
        """
        with contextlib.suppress(ToxiproxyError):
            self._call("DELETE", f"/proxies/{name}")
        listen = f"127.0.0.1:{listen_port or processes.free_port()}"
        self._call(
            "POST",
            "/proxies",
            {"name": name, "listen": listen, "upstream": upstream, "enabled": True},
        )
        return Proxy(self, name, listen, upstream)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (Toxiproxy's ``POST /reset``)."""
        self._call("POST", "/reset")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.api_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: {exc.code} {exc.read().decode(errors='replace')}"
            ) from exc
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:  # /version answers plain text
            return text.decode(errors="replace")


@dataclass
class Proxy:
    """One Toxiproxy proxy: ``listen`` (``127.0.0.1:port``) forwards to ``upstream``."""

    server: Toxiproxy
    name: str
    listen: str
    upstream: str

    @property
    def url(self) -> str:
        """``https://<listen>``: the apiserver URL through this proxy."""
        return f"https://{self.listen}"

    def add_toxic(
        self,
        kind: str,
        attributes: dict[str, int],
        *,
        stream: Literal["upstream", "downstream"] = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
    ) -> str:
        """Add a toxic of type ``kind`` (``latency``, ``timeout``, ``reset_peer``,
        ``bandwidth``, ``slicer``, ``limit_data``, ``slow_close``) on ``stream``
        (``downstream``: apiserver to client); returns its name. Applies to open connections
        too. Raises :class:`ToxiproxyError` when refused (e.g. the name exists)."""
        toxic = name or f"{kind}_{stream}"
        self.server._call(
            "POST",
            f"/proxies/{self.name}/toxics",
            {
                "name": toxic,
                "type": kind,
                "stream": stream,
                "toxicity": toxicity,
                "attributes": attributes,
            },
        )
        return toxic

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name``. Raises :class:`ToxiproxyError` if there is none."""
        self.server._call("DELETE", f"/proxies/{self.name}/toxics/{name}")

    def toxics(self) -> list[str]:
        """Names of the toxics on this proxy."""
        answer = self.server._call("GET", f"/proxies/{self.name}/toxics")
        return [t["name"] for t in answer or []]

    def clear(self) -> None:
        """Remove every toxic and enable the proxy: the path is clean again."""
        for toxic in self.toxics():
            with contextlib.suppress(ToxiproxyError):
                self.remove_toxic(toxic)
        self.set_enabled(True)

    def set_enabled(self, enabled: bool) -> None:
        """Enable or disable the proxy; disabled, it closes its connections and refuses new
        ones (connection refused: nothing listens on its port)."""
        self.server._call("POST", f"/proxies/{self.name}", {"enabled": enabled})

    def apply(self, kind: TransportFault, *, latency_ms: int = 2000, rate_kb: int = 4) -> list[str]:
        """Start fault ``kind`` (see the module docs); returns the toxics added (none for
        ``down``). Undo with :meth:`clear`."""
        if kind == "latency":
            return [self.add_toxic("latency", {"latency": latency_ms, "jitter": 0})]
        if kind == "reset":
            return [
                self.add_toxic("reset_peer", {"timeout": 0}, stream=stream)
                for stream in ("upstream", "downstream")
            ]
        if kind == "hang":
            return [
                self.add_toxic("timeout", {"timeout": 0}, stream=stream)
                for stream in ("upstream", "downstream")
            ]
        if kind == "bandwidth":
            return [self.add_toxic("bandwidth", {"rate": rate_kb})]
        if kind == "down":
            self.set_enabled(False)
            return []
        raise ValueError(f"unknown transport fault {kind!r}; expected one of {TRANSPORT_FAULTS}")

    @contextlib.contextmanager
    def fault(
        self, kind: TransportFault, *, latency_ms: int = 2000, rate_kb: int = 4
    ) -> Iterator[None]:
        """Context manager: fault ``kind`` while inside, a clean path after (even on error)."""
        self.apply(kind, latency_ms=latency_ms, rate_kb=rate_kb)
        try:
            yield
        finally:
            self.clear()
