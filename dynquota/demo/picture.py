"""The demo's picture: each namespace's ``hard`` and usage over time (``dynquota demo``).

:class:`SeriesRecorder` samples, in a thread, what :mod:`dynquota.demo` hands it (the managed
quotas' ``spec.hard``, the operator's usage ``U``, overrides, the kill switch) every
``period`` seconds; :func:`write_picture` draws them with matplotlib (the ``demo`` extra, never
a dependency of the operator): one panel per namespace and resource, ``hard`` as a staircase,
usage as a line, an override as an orange band, the kill switch as a red band. Without
matplotlib it says how to install it instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Sample", "SeriesRecorder", "default_picture_path", "write_picture"]


@dataclass(frozen=True)
class Sample:
    """One observation at ``t`` seconds since the recorder started.

    ``hard`` and ``usage``: ``{(namespace, resource): count}``, a key missing when there is no
    managed quota (hard) or no decision yet (usage); ``overrides``: namespaces whose quota
    carries ``dynquota.io/override``; ``kill_switch``: engaged.
    """

    t: float
    hard: dict[tuple[str, str], int]
    usage: dict[tuple[str, str], int]
    overrides: frozenset[str] = frozenset()
    kill_switch: bool = False


@dataclass
class SeriesRecorder:
    """Calls ``observe()`` every ``period`` seconds in a daemon thread between :meth:`start`
    and :meth:`stop`; keeps the samples. ``observe`` returns a :class:`Sample` whose ``t`` is
    ignored (the recorder stamps it), or raises ``Exception`` to skip one sample."""

    observe: Callable[[], Sample]
    period: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _start: float = 0.0

    def start(self) -> SeriesRecorder:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="demo-series", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                s = self.observe()
            except Exception:  # an API hiccup loses one point of a picture, nothing else
                s = None
            if s is not None:
                t = time.monotonic() - self._start
                self.samples.append(Sample(t, s.hard, s.usage, s.overrides, s.kill_switch))
            self._stop.wait(self.period)

    def stop(self) -> None:
        """Stop sampling (idempotent); waits up to 10 s for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def default_picture_path() -> Path:
    """``$TMPDIR/dynquota-demo/demo-<UTC time>.png`` (outside any checkout)."""
    import tempfile

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path(tempfile.gettempdir()) / "dynquota-demo" / f"demo-{stamp}.png"


def _bands(samples: Sequence[Sample], on: Callable[[Sample], bool]) -> list[tuple[float, float]]:
    """Time intervals where ``on(sample)`` holds, as (start, end) seconds."""
    bands: list[tuple[float, float]] = []
    begin: float | None = None
    for s in samples:
        if on(s) and begin is None:
            begin = s.t
        elif not on(s) and begin is not None:
            bands.append((begin, s.t))
            begin = None
    if begin is not None and samples:
        bands.append((begin, samples[-1].t))
    return bands


def _overridden(namespace: str) -> Callable[[Sample], bool]:
    return lambda s: namespace in s.overrides


def write_picture(
    samples: Sequence[Sample],
    panels: Sequence[tuple[str, str, str]],
    path: Path,
    title: str = "dynquota demo",
) -> str:
    """Draw ``panels`` — ``(namespace, resource, caption)`` — from ``samples`` into ``path``
    (PNG, or SVG by suffix). Returns a one-line message: the path written, or why not
    (matplotlib missing, no samples). Raises ``OSError`` if ``path`` cannot be written."""
    if not samples:
        return "picture: nothing recorded"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "picture skipped: matplotlib is not installed "
            "(pip install 'dynquota[demo]', or `make setup` in a checkout)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    kill = _bands(samples, lambda s: s.kill_switch)
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.2 * len(panels)), sharex=True)
    axes_list = list(axes) if len(panels) > 1 else [axes]
    for ax, (ns, resource, caption) in zip(axes_list, panels, strict=True):
        key = (ns, resource)
        ts = [s.t for s in samples]
        hard = [s.hard.get(key, float("nan")) for s in samples]
        usage = [s.usage.get(key, float("nan")) for s in samples]
        ax.step(ts, hard, where="post", color="tab:blue", linewidth=2, label="hard (spec.hard)")
        ax.plot(ts, usage, color="tab:green", linewidth=1.5, label="usage U")
        for i, (a, b) in enumerate(_bands(samples, _overridden(ns))):
            ax.axvspan(a, b, color="tab:orange", alpha=0.2, label="override" if i == 0 else None)
        for i, (a, b) in enumerate(kill):
            ax.axvspan(a, b, color="tab:red", alpha=0.15, label="kill switch" if i == 0 else None)
        ax.set_title(f"{ns} · {resource}: {caption}", loc="left", fontsize=10)
        ax.set_ylabel(resource)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes_list[-1].set_xlabel("seconds since recording started")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"picture: {path}"
