"""Child processes of the test bed: binaries found or built, spawned so they die with us,
stopped politely (I/O).

Shared by :mod:`dynquota.testing.controlplane` (etcd, kube-apiserver, ...) and
:mod:`dynquota.testing.toxiproxy`. Every child is forked from one long-lived thread and gets
SIGKILL when the launching process dies (:func:`die_with_parent`), so a crashed or killed test
run leaves nothing listening.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import random
import signal
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

__all__ = ["build_assets", "die_with_parent", "free_port", "http_ok", "spawn", "stop"]

# One thread that lives as long as the process forks every child (see die_with_parent).
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cp-spawner")


def build_assets(
    tool: str,
    error: Callable[[str], Exception],
    env: str,
    present: Callable[[Path], bool],
    missing: str,
) -> Path:
    """The directory of a tool's binaries: ``$<env>`` when ``present(dir)`` holds for it,
    otherwise the directory ``hack/<tool>/build.sh`` of this source tree prints last (it
    builds only when its cache, keyed by version, is missing).

    Raises:
        Exception: ``error(message)``: no assets and no build script (``missing`` says what
            to set), or the build failed.
    """
    assets = os.environ.get(env)
    if assets and present(Path(assets)):
        return Path(assets)
    script = Path(__file__).resolve().parents[2] / "hack" / tool / "build.sh"
    if not script.exists():
        raise error(f"{missing}, or run from a dynquota source checkout")
    done = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise error(f"{script} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


# Below Linux's ephemeral range (32768-60999): a port handed out there can be taken, before
# the child binds it, as the local port of any outgoing connection (the 429 noise threads open
# hundreds); a replica whose liveness port was taken exited with 1 in CI.
_PORT_RANGE = (20000, 32767)
_HANDED_OUT: set[int] = set()
_PORT_LOCK = threading.Lock()
# not the module's generator: a test that seeds it would make two workers pick alike
_RANDOM = random.SystemRandom()


def free_port() -> int:
    """A TCP port free on every interface now, below the ephemeral range and not handed out
    before by this process (so two children started together never get the same one).

    Raises ``OSError`` when 200 random tries found none."""
    with _PORT_LOCK:
        for _ in range(200):
            port = _RANDOM.randint(*_PORT_RANGE)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    raise OSError(f"no free TCP port in {_PORT_RANGE} after 200 tries")


def die_with_parent() -> None:
    """``preexec_fn`` of every child: SIGKILL it when the launching process dies."""
    # PR_SET_PDEATHSIG = 1. The signal fires when the *thread* that forked exits, so every
    # child is forked from _SPAWNER's one long-lived thread.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def spawn(
    argv: list[str], stdout: IO[bytes] | int, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (stdin from /dev/null, stderr to ``stdout``, ``env`` or ours) as a child
    that dies with us. Raises ``OSError`` when it cannot be started."""
    return _SPAWNER.submit(
        subprocess.Popen,
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        env=env,
        preexec_fn=die_with_parent,
    ).result()


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
    """Stop ``proc`` (SIGTERM, then SIGKILL after ``timeout`` seconds); a no-op if it is None
    or ended."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def http_ok(url: str, verify: bool = True) -> bool:
    """True when GET ``url`` answers 200 within 2 s."""
    # verify=False only for a component's self-signed loopback health endpoint
    ctx = None if verify else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
