"""Ports of the tables (1 of 2) of kube-apiserver v1.37.2's pods_test.go.

``pkg/quota/v1/evaluator/core/pods_test.go``: ``TestPodConstraintsFunc`` and
``TestPodEvaluatorUsage`` (the others in ``test_upstream_pods_scopes.py``), case by case (the
pytest id is the upstream case name), through the library's
:class:`~dynquota.admission.PodEvaluator`, with the feature gates as v1.37.2 ships them
(PodLevelResources and InPlacePodVerticalScaling on).
"""

from __future__ import annotations

from typing import Any

import pytest

from ._upstream import EV, NOW, base, c, iso, pod

# --- TestPodConstraintsFunc ------------------------------------------------------------------

_CPU_ONLY = {"requests": {"cpu": "1m"}, "limits": {"cpu": "2m"}}


@pytest.mark.parametrize(
    ("p", "required", "err"),
    [
        pytest.param(
            pod(init=[c("dummy", **_CPU_ONLY)]),
            ["memory"],
            "must specify memory for: dummy",
            id="init container resource missing",
        ),
        pytest.param(
            pod(init=[c("foo", **_CPU_ONLY), c("bar", **_CPU_ONLY)]),
            ["memory"],
            "must specify memory for: bar,foo",
            id="multiple init container resource missing",
        ),
        pytest.param(
            pod([c("dummy", **_CPU_ONLY)]),
            ["memory"],
            "must specify memory for: dummy",
            id="container resource missing",
        ),
        pytest.param(
            pod([c("foo", **_CPU_ONLY), c("bar", **_CPU_ONLY)]),
            ["memory"],
            "must specify memory for: bar,foo",
            id="multiple container resource missing",
        ),
        pytest.param(
            pod([c("foo"), c("bar")]),
            ["memory", "cpu"],
            "must specify cpu for: bar,foo; memory for: bar,foo",
            id="container resource missing multiple",
        ),
        pytest.param(
            pod([c("foo"), c("bar")], resources={"requests": {"cpu": "1m"}}),
            ["memory", "cpu"],
            None,
            id="pod-level resource set, container-level required resources missing",
        ),
    ],
)
def test_TestPodConstraintsFunc(  # noqa: N802
    p: dict[str, Any], required: list[str], err: str | None
) -> None:
    assert EV.constraints(required, p) == err


# --- TestPodEvaluatorUsage -------------------------------------------------------------------

_DONGLE3 = {"example.com/dongle": "3"}


@pytest.mark.parametrize(
    ("p", "usage"),
    [
        pytest.param(
            pod(init=[c(requests={"cpu": "1m"}, limits={"cpu": "2m"})]),
            base(**{"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m"}),
            id="init container CPU",
        ),
        pytest.param(
            pod(init=[c(requests={"memory": "1m"}, limits={"memory": "2m"})]),
            base(**{"requests.memory": "1m", "limits.memory": "2m", "memory": "1m"}),
            id="init container MEM",
        ),
        pytest.param(
            pod(
                init=[
                    c(requests={"ephemeral-storage": "32Mi"}, limits={"ephemeral-storage": "64Mi"})
                ]
            ),
            base(
                **{
                    "ephemeral-storage": "32Mi",
                    "requests.ephemeral-storage": "32Mi",
                    "limits.ephemeral-storage": "64Mi",
                }
            ),
            id="init container local ephemeral storage",
        ),
        pytest.param(
            pod(init=[c(requests={"hugepages-2Mi": "100Mi"})]),
            base(**{"hugepages-2Mi": "100Mi", "requests.hugepages-2Mi": "100Mi"}),
            id="init container hugepages",
        ),
        pytest.param(
            pod(init=[c(requests=_DONGLE3, limits=_DONGLE3)]),
            base(**{"requests.example.com/dongle": "3"}),
            id="init container extended resources",
        ),
        pytest.param(
            pod([c(requests={"cpu": "1m"}, limits={"cpu": "2m"})]),
            base(**{"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m"}),
            id="container CPU",
        ),
        pytest.param(
            pod([c(requests={"memory": "1m"}, limits={"memory": "2m"})]),
            base(**{"requests.memory": "1m", "limits.memory": "2m", "memory": "1m"}),
            id="container MEM",
        ),
        pytest.param(
            pod([c(requests={"ephemeral-storage": "32Mi"}, limits={"ephemeral-storage": "64Mi"})]),
            base(
                **{
                    "ephemeral-storage": "32Mi",
                    "requests.ephemeral-storage": "32Mi",
                    "limits.ephemeral-storage": "64Mi",
                }
            ),
            id="container local ephemeral storage",
        ),
        pytest.param(
            pod([c(requests={"hugepages-2Mi": "100Mi"})]),
            base(**{"hugepages-2Mi": "100Mi", "requests.hugepages-2Mi": "100Mi"}),
            id="container hugepages",
        ),
        pytest.param(
            pod([c(requests=_DONGLE3, limits=_DONGLE3)]),
            base(**{"requests.example.com/dongle": "3"}),
            id="container extended resources",
        ),
        pytest.param(
            pod([c(requests=_DONGLE3, limits=_DONGLE3)], status={"phase": "Succeeded"}),
            {"count/pods": "1"},
            id="terminated generic count still appears",
        ),
        pytest.param(
            pod(
                [
                    c(
                        requests={"cpu": "1", "memory": "50M", "example.com/dongle": "1"},
                        limits={"cpu": "2", "memory": "100M", "example.com/dongle": "1"},
                    ),
                    c(
                        requests={"cpu": "2", "memory": "25M", "example.com/dongle": "2"},
                        limits={"cpu": "5", "memory": "50M", "example.com/dongle": "2"},
                    ),
                ],
                init=[
                    c(
                        requests={"cpu": "4", "memory": "100M", "example.com/dongle": "4"},
                        limits={"cpu": "8", "memory": "200M", "example.com/dongle": "4"},
                    ),
                    c(
                        requests={"cpu": "1", "memory": "50M", "example.com/dongle": "2"},
                        limits={"cpu": "2", "memory": "100M", "example.com/dongle": "2"},
                    ),
                ],
            ),
            base(
                **{
                    "requests.cpu": "4",
                    "requests.memory": "100M",
                    "limits.cpu": "8",
                    "limits.memory": "200M",
                    "cpu": "4",
                    "memory": "100M",
                    "requests.example.com/dongle": "4",
                }
            ),
            id="init container maximums override sum of containers",
        ),
        pytest.param(
            pod(
                [c(requests={"cpu": "1", "memory": "50M"}, limits={"cpu": "2", "memory": "100M"})],
                meta={"deletionTimestamp": iso(NOW - 60), "deletionGracePeriodSeconds": 30},
                status={"reason": "NodeLost"},
                terminationGracePeriodSeconds=30,
            ),
            {"count/pods": "1"},
            id="pod deletion timestamp exceeded",
        ),
        pytest.param(
            pod(
                [c(requests={"cpu": "1"}, limits={"cpu": "2"})],
                meta={"deletionTimestamp": iso(NOW), "deletionGracePeriodSeconds": 30},
                status={"reason": "NodeLost"},
            ),
            base(**{"requests.cpu": "1", "limits.cpu": "2", "cpu": "1"}),
            id="pod deletion timestamp not exceeded",
        ),
        pytest.param(
            pod([c(requests={"cpu": "1"}, limits={"cpu": "2"})], overhead={"cpu": "1"}),
            base(**{"requests.cpu": "2", "limits.cpu": "3", "cpu": "2"}),
            id="count pod overhead as usage",
        ),
        pytest.param(
            pod(resources={"requests": {"cpu": "1m"}, "limits": {"cpu": "2m"}}),
            base(**{"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m"}),
            id="pod-level CPU",
        ),
        pytest.param(
            pod(resources={"requests": {"memory": "1Mi"}, "limits": {"memory": "2Mi"}}),
            base(**{"requests.memory": "1Mi", "limits.memory": "2Mi", "memory": "1Mi"}),
            id="pod-level Memory",
        ),
        pytest.param(
            pod(
                [c(requests={"ephemeral-storage": "32Mi"}, limits={"ephemeral-storage": "64Mi"})],
                resources={"requests": {"memory": "1Mi"}, "limits": {"memory": "2Mi"}},
            ),
            base(
                **{
                    "ephemeral-storage": "32Mi",
                    "requests.ephemeral-storage": "32Mi",
                    "limits.ephemeral-storage": "64Mi",
                    "requests.memory": "1Mi",
                    "limits.memory": "2Mi",
                    "memory": "1Mi",
                }
            ),
            id="pod-level memory with container-level ephemeral storage",
        ),
    ],
)
def test_TestPodEvaluatorUsage(p: dict[str, Any], usage: dict[str, str]) -> None:  # noqa: N802
    assert {k: str(v) for k, v in sorted(EV.usage(p, NOW).items())} == dict(sorted(usage.items()))
