"""The LimitRanger's ``min``/``max``/``maxLimitRequestRatio`` checks, ported for ``dynquota
fit`` without a dry run (``limit_range_refusal``): upstream's texts, Container items over every
container and init container, Pod items over the pod's totals (a sidecar adds to the sum, an
init container counts at its peak), milli-unit comparison, the first LimitRange that refuses
answers. The same cases against the apiserver: tests/integration/test_fit.py"""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.admission.errors import InvalidObjectError
from dynquota.admission.limitranger import limit_range_refusal


def lr(name: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"limits": list(items)}}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"spec": spec}


def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
      **extra: Any) -> dict[str, Any]:  # fmt: skip
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": "c", "resources": resources, **extra}


@pytest.mark.parametrize(
    ("item", "the_pod", "why"),
    [
        ({"type": "Container", "max": {"cpu": "1"}}, pod(c({"cpu": "500m"}, {"cpu": "2"})),
         "maximum cpu usage per Container is 1, but limit is 2"),
        ({"type": "Container", "max": {"cpu": "1"}}, pod(c({"cpu": "500m"})),
         "maximum cpu usage per Container is 1.  No limit is specified"),
        ({"type": "Container", "max": {"memory": "1Gi"}},
         pod(c({"memory": "1Gi"}, {"memory": "1Gi"}),
             init=(c({"memory": "2Gi"}, {"memory": "2Gi"}),)),
         "maximum memory usage per Container is 1Gi, but limit is 2Gi"),
        ({"type": "Container", "min": {"cpu": "100m"}}, pod(c({"cpu": "50m"})),
         "minimum cpu usage per Container is 100m, but request is 50m"),
        ({"type": "Container", "min": {"cpu": "100m"}}, pod(c({"memory": "1"})),
         "minimum cpu usage per Container is 100m.  No request is specified"),
        ({"type": "Container", "min": {"cpu": "1m"}}, pod(c({"cpu": "0.0005"})),
         None),  # milli-units, rounded up: 0.5m is 1m, as upstream's MilliValue()
        ({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
         pod(c({"cpu": "250m"}, {"cpu": "1"})),
         "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"),
        ({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}, pod(c(None, None)),
         "cpu max limit to request ratio per Container is 2, but no request is specified or "
         "request is 0"),
        ({"type": "Pod", "max": {"cpu": "1"}},
         pod(c({"cpu": "600m"}, {"cpu": "600m"}), c({"cpu": "600m"}, {"cpu": "600m"})),
         "maximum cpu usage per Pod is 1, but limit is 1200m"),
        ({"type": "Pod", "max": {"cpu": "2"}},  # the init container's peak is 3, above the sum
         pod(c({"cpu": "1"}, {"cpu": "1"}), init=(c({"cpu": "3"}, {"cpu": "3"}),)),
         "maximum cpu usage per Pod is 2, but limit is 3"),
        ({"type": "Pod", "max": {"cpu": "2"}},  # a sidecar adds to the sum: 1 + 1500m
         pod(c({"cpu": "1"}, {"cpu": "1"}),
             init=(c({"cpu": "1500m"}, {"cpu": "1500m"}, restartPolicy="Always"),)),
         "maximum cpu usage per Pod is 2, but limit is 2500m"),
        ({"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}, pod(c({"cpu": "1"})),
         None),  # claims are not pods
    ],
)  # fmt: skip
def test_each_constraint_refuses_with_upstreams_text(
    item: dict[str, Any], the_pod: dict[str, Any], why: str | None
) -> None:
    found = limit_range_refusal(the_pod, [lr("limits", item)])
    assert found == (None if why is None else ("limits", why))


def test_several_violations_are_one_aggregate_and_the_first_refusing_range_answers() -> None:
    quiet = lr("a-quiet", {"type": "Container", "max": {"cpu": "8"}})
    strict = lr("b-strict", {"type": "Container", "max": {"cpu": "1", "memory": "1Gi"}})
    later = lr("c-later", {"type": "Container", "max": {"cpu": "100m"}})
    the_pod = pod(c({"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"}))
    assert limit_range_refusal(the_pod, [quiet, strict, later]) == (
        "b-strict",
        "[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per "
        "Container is 1Gi, but limit is 2Gi]",
    )
    assert limit_range_refusal(the_pod, [quiet]) is None


def test_containers_breaking_a_constraint_alike_are_one_violation_as_upstreams_aggregate() -> None:
    # PodValidateLimitFunc appends one error per container; their texts name no container,
    # and the aggregate's Error() gives each text once (no brackets when one is left)
    ratio = lr("ratio", {"type": "Container", "maxLimitRequestRatio": {"memory": "2"}})
    four, three = (
        c({"memory": "16Mi"}, {"memory": "64Mi"}),
        c({"memory": "16Mi"}, {"memory": "48Mi"}),
    )
    text = "memory max limit to request ratio per Container is 2, but provided ratio is {}"
    assert limit_range_refusal(pod(four, four, init=(four,)), [ratio]) == (
        "ratio", text.format("4.000000"),
    )  # fmt: skip
    assert limit_range_refusal(pod(four, three, four), [ratio]) == (
        "ratio", f"[{text.format('4.000000')}, {text.format('3.000000')}]",
    )  # fmt: skip


def test_an_amount_that_is_not_a_quantity_is_an_invalid_object() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec.limits\[0\].max\[cpu\]"):
        limit_range_refusal(pod(c()), [lr("x", {"type": "Container", "max": {"cpu": "lots"}})])
