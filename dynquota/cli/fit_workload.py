"""What of a workload already exists, as ``kubectl dynquota fit`` reads it (Pure).

``fit`` answers for what a scale or rollout to the manifest's replicas needs, so what the
workload itself holds now is not "other usage":

- :func:`owned_pods`: the live workload's pods, by the ``ownerReferences`` chain its
  controller writes (a Deployment's ReplicaSets, then their pods; a StatefulSet's,
  ReplicaSet's or Job's own pods). Their charge is taken out of the quotas' usage
  (:func:`dynquota.admission.fit.without`) and the manifest's replicas are counted instead;
- :func:`rollout_surge`: a Deployment that exists, rolls out with ``RollingUpdate`` and whose
  pod template the manifest changes runs up to ``maxSurge`` pods above its replicas while it
  rolls (the deployment controller's ``ResolveFenceposts``: a percentage of the replicas
  rounded up, 25 % by default); those are asked for too (docs/tenants.md, "Will it fit?");
- :func:`claim_runs`: a StatefulSet's replica ``i`` needs a claim ``<template>-<name>-<i>``
  per volume claim template; one that exists already is charged already. The replicas are
  cut into runs of consecutive ordinals that need the same new claims.

Shapes: objects are Kubernetes JSON (camelCase) as the API serves them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from dynquota.cli.fit_manifest import Workload

__all__ = ["claim_name", "claim_runs", "owned_pods", "rollout_surge"]

DEFAULT_MAX_SURGE = "25%"
"""A Deployment's ``spec.strategy.rollingUpdate.maxSurge`` when not given (API default)."""


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _owned_by(obj: Mapping[str, Any], uids: Collection[str]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") and r.get("uid") in uids for r in refs)


def owned_pods(
    live: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    replica_sets: Sequence[Mapping[str, Any]] = (),
) -> list[Mapping[str, Any]]:
    """The pods of ``pods`` that the live workload ``live`` controls (through the ReplicaSets
    of ``replica_sets`` it controls when it is a Deployment, else directly: the controller
    owner reference's ``uid``) and that a new one replaces: not a finished pod (``Succeeded``,
    ``Failed``: it stays, and ``count/pods`` keeps counting it)."""
    owners = {_uid(live)}
    if live.get("kind") == "Deployment":
        owners = {_uid(rs) for rs in replica_sets if _owned_by(rs, owners)}
    done = ("Succeeded", "Failed")
    return [
        p for p in pods if _owned_by(p, owners) and (p.get("status") or {}).get("phase") not in done
    ]


def _contains(live: object, written: object) -> bool:
    """Whether everything ``written`` says, ``live`` says too (the apiserver adds defaults
    only): objects key by key, lists item by item."""
    if isinstance(written, Mapping):
        return isinstance(live, Mapping) and all(
            k in live and _contains(live[k], v) for k, v in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(live, list)
            and len(live) == len(written)
            and all(_contains(a, b) for a, b in zip(live, written, strict=True))
        )
    return live == written or str(live) == str(written)


def rollout_surge(workload: Workload, live: Mapping[str, Any] | None, replicas: int) -> int:
    """How many pods above ``replicas`` the rollout of ``workload`` runs at once: ``maxSurge``
    resolved against ``replicas`` (``25%`` of 10 is 3), when ``workload`` is a Deployment
    that exists (``live``), rolls with ``RollingUpdate`` (the manifest's strategy, else the
    live one's) and the manifest's pod template is not already the live one's (a scale alone
    creates no surge); else 0."""
    if workload.kind != "Deployment" or live is None:
        return 0
    live_spec = live.get("spec") or {}
    if _contains(live_spec.get("template"), workload.template):
        return 0
    strategy = workload.strategy or live_spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", DEFAULT_MAX_SURGE)
    if isinstance(surge, str) and surge.endswith("%"):
        return math.ceil(replicas * int(surge[:-1]) / 100)
    return int(surge)


def claim_name(template: Mapping[str, Any], workload: str, ordinal: int) -> str:
    """``<template>-<statefulset>-<ordinal>``, the claim a StatefulSet's replica uses."""
    return f"{(template.get('metadata') or {}).get('name')}-{workload}-{ordinal}"


def claim_runs(
    workload: Workload, existing: Collection[str]
) -> list[tuple[int, int, tuple[int, ...]]]:
    """The replicas of ``workload`` as runs ``(first ordinal, count, new claims)``: ``new
    claims`` are the indexes in :attr:`Workload.claims` of the claims those replicas still
    need (their name not in ``existing``). A workload without claim templates is one run.
    Only the ordinals an existing claim names are looked at (a run ends only there), so a
    count of 10^8 costs what its claims cost."""
    every = tuple(range(len(workload.claims)))
    if not every:
        return [(0, workload.replicas, ())]
    marked: set[int] = set()
    for template in workload.claims:
        prefix = claim_name(template, workload.name, 0)[:-1]
        for name in existing:
            tail = name[len(prefix) :]
            if name.startswith(prefix) and tail.isdigit() and int(tail) < workload.replicas:
                marked.add(int(tail))
    runs: list[tuple[int, int, tuple[int, ...]]] = []

    def extend(first: int, count: int, need: tuple[int, ...]) -> None:
        if count <= 0:
            return
        if runs and runs[-1][2] == need and runs[-1][0] + runs[-1][1] == first:
            runs[-1] = (runs[-1][0], runs[-1][1] + count, need)
        else:
            runs.append((first, count, need))

    ordinal = 0
    for mark in sorted(marked):
        extend(ordinal, mark - ordinal, every)
        need = tuple(
            i for i in every if claim_name(workload.claims[i], workload.name, mark) not in existing
        )
        extend(mark, 1, need)
        ordinal = mark + 1
    extend(ordinal, workload.replicas - ordinal, every)
    return runs or [(0, 0, every)]
