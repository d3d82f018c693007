"""The generated scenarios of the ``fit`` benchmark (issue 31; imported from the same
directory): a namespace's quotas, LimitRange, policy, budget and workload, drawn from a seeded
random source so a run can be repeated (``DYNQUOTA_FIT_BENCH_SEED``).

Each scenario mixes: a DynamicQuotaPolicy on ``pods`` (buffer 25-100 %, minimum 4-12, maximum
up to 40 above it, an upscale cooldown of 12, 15 or 20 s), sometimes a dynamic
``requests.cpu`` key too (then always with a LimitRange default); fixed quotas (an unscoped
``pods`` cap, a ``requests.cpu`` quota, quotas scoped ``BestEffort``, ``NotBestEffort``,
``PriorityClass`` or, for Jobs, ``Terminating``); a LimitRange default request; sometimes a
QuotaBudget on ``pods`` of which the namespace is the only member (its slice plus the free
room is the budget's ``hard``); a Deployment, a Parallel
StatefulSet or a Job (its pods select no node: they stay Pending, charged, never complete) of
a few pods up to ten more than the policy's maximum; sometimes other pods already in the
namespace (its other usage, which stays). The policy is always mid-cooldown when ``fit`` runs:
its quota was just created (the first raise of ``pods`` waits a whole cooldown) and, with a
dynamic ``requests.cpu``, another pod's 800m made the key's first sizing a raise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from dynquota.testing.growth import PENDING
from dynquota.testing.operator import PAUSE

PRIORITY_CLASS = "fit-bench-high"
"""A PriorityClass the benchmark creates once (the ``PriorityClass`` scope's value)."""


@dataclass
class Scenario:
    """One generated scenario; :meth:`objects` gives what to create."""

    index: int
    kind: str
    replicas: int
    cooldown: int
    pods: dict[str, Any]
    cpu: dict[str, Any] | None = None
    request: str | None = None
    default_request: str | None = None
    priority: bool = False
    deadline: bool = False
    quotas: list[dict[str, Any]] = field(default_factory=list)
    budget: int | None = None
    others: list[str | None] = field(default_factory=list)

    @property
    def features(self) -> list[str]:
        """Short words for the report: ``sts``, ``cpu-key``, ``lr``, ``budget``, quota names."""
        words = [self.kind.lower()[:3], f"cd{self.cooldown}"]
        words += ["cpu-key"] * (self.cpu is not None) + ["lr"] * (self.default_request is not None)
        words += ["budget"] * (self.budget is not None) + ["prio"] * self.priority
        words += [f"others{len(self.others)}"] * bool(self.others)
        return words + [q["metadata"]["name"] for q in self.quotas]

    def policy_resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = {"pods": self.pods}
        if self.cpu is not None:
            resources["requests.cpu"] = self.cpu
        return resources

    def limit_range(self) -> dict[str, Any] | None:
        if self.default_request is None:
            return None
        item = {"type": "Container", "defaultRequest": {"cpu": self.default_request},
                "default": {"cpu": "500m"}}  # fmt: skip
        return {"metadata": {"name": "defaults"}, "spec": {"limits": [item]}}

    def other_pods(self) -> list[dict[str, Any]]:
        """The namespace's other usage, there before the policy: bare pods (Pending: they
        select no node) requesting the cpu of :attr:`others` (``None``: none stated)."""
        pods = []
        for n, cpu in enumerate(self.others):
            container: dict[str, Any] = {"name": "app", "image": PAUSE}
            if cpu is not None:  # a limit of its own: the LimitRange's default limit is 500m
                container["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": "1"}}
            spec = {"containers": [container], "nodeSelector": PENDING,
                    "terminationGracePeriodSeconds": 0}  # fmt: skip
            pods.append({"metadata": {"name": f"other-{n}"}, "spec": spec})
        return pods

    def workload(self) -> dict[str, Any]:
        """The workload body (``apiVersion``/``kind`` included), named ``web``."""
        container: dict[str, Any] = {"name": "app", "image": PAUSE}
        if self.request is not None:
            container["resources"] = {"requests": {"cpu": self.request}}
        spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
        if self.priority:
            spec["priorityClassName"] = PRIORITY_CLASS
        template: dict[str, Any] = {"metadata": {"labels": {"app": "web"}}, "spec": spec}
        if self.kind == "Job":
            spec["restartPolicy"] = "Never"
            spec["nodeSelector"] = PENDING
            if self.deadline:
                spec["activeDeadlineSeconds"] = 3600
            body = {"parallelism": self.replicas, "completions": self.replicas,
                    "backoffLimit": 0, "template": template}  # fmt: skip
            return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web"},
                    "spec": body}  # fmt: skip
        body = {"replicas": self.replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": template}  # fmt: skip
        if self.kind == "StatefulSet":
            body |= {"serviceName": "web", "podManagementPolicy": "Parallel"}
        return {"apiVersion": "apps/v1", "kind": self.kind, "metadata": {"name": "web"},
                "spec": body}  # fmt: skip


def _quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}


def generate(index: int, seed: int) -> Scenario:
    """Scenario ``index`` of the run seeded ``seed`` (module docs)."""
    rng = random.Random(seed * 1_000_003 + index)
    kind = rng.choice(["Deployment", "Deployment", "StatefulSet", "Job"])
    cooldown = rng.choice([12, 15, 20])
    minimum = rng.randint(4, 12)
    maximum = minimum + rng.randint(4, 40)
    buffer = rng.choice([25, 40, 50, 100])
    pods = {"bufferPercent": buffer, "minimum": minimum, "maximum": maximum,
            "upscaleCooldown": f"{cooldown}s", "downscaleCooldown": "1h"}  # fmt: skip
    replicas = rng.randint(max(1, minimum - 3), maximum + 10)
    s = Scenario(index, kind, replicas, cooldown, pods)
    s.request = rng.choice([None, None, "100m", "200m", "250m"])
    if rng.random() < 0.5:
        s.default_request = rng.choice(["100m", "150m"])
    if s.default_request is not None and rng.random() < 0.35:
        cpu_cooldown = rng.choice([15, 20])
        s.cpu = {"bufferPercent": 50, "minimum": "1", "maximum": rng.choice(["2", "3", "4"]),
                 "upscaleCooldown": f"{cpu_cooldown}s", "downscaleCooldown": "1h"}  # fmt: skip
    if s.cpu is not None:
        # usage of 800m makes the key's first sizing a raise (T(800m) = 1200m above the 1 core
        # minimum), so it is mid-cooldown too; a key sized from unknown usage has its
        # cooldown counted as run out, and would be raised while the pods that fit now come
        s.others = ["800m"]
    elif rng.random() < 0.3:
        s.others = [rng.choice([None, "100m"]) for _ in range(rng.randint(1, 2))]
    s.priority = rng.random() < 0.25
    s.deadline = kind == "Job" and rng.random() < 0.5
    charges_cpu = s.request is not None or s.default_request is not None
    if rng.random() < 0.35:
        s.quotas.append(_quota("cap", {"pods": str(rng.randint(3, maximum))}))
    if rng.random() < (0.4 if charges_cpu else 0.08):  # without a request: refused for good
        s.quotas.append(_quota("compute", {"requests.cpu": rng.choice(["1", "2", "3"])}))
    scoped = rng.random()
    if scoped < 0.15:
        s.quotas.append(_quota("besteffort", {"pods": str(rng.randint(2, 12))},
                               scopes=["BestEffort"]))  # fmt: skip
    elif scoped < 0.3:
        s.quotas.append(_quota("notbesteffort", {"pods": str(rng.randint(2, 20))},
                               scopes=["NotBestEffort"]))  # fmt: skip
    elif scoped < 0.45:
        selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                          "values": [PRIORITY_CLASS]}]}  # fmt: skip
        s.quotas.append(_quota("priority", {"pods": str(rng.randint(2, 15))},
                               scopeSelector=selector))  # fmt: skip
    elif scoped < 0.55 and kind == "Job":
        s.quotas.append(_quota("terminating", {"pods": str(rng.randint(2, 15))},
                               scopes=["Terminating"]))  # fmt: skip
    if rng.random() < 0.2:
        s.budget = rng.randint(minimum + 2, maximum + 5)
    return s
