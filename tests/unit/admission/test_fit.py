"""How many copies of one pod a namespace's quotas admit (dynquota.admission.fit), and the
LimitRange defaults applied before (dynquota.admission.limitranger)."""

from __future__ import annotations

from typing import Any

from dynquota.admission.fit import KeyRoom, QuotaRoom, copies_that_fit, quota_rooms, refusal
from dynquota.admission.limitranger import apply_limit_range_defaults, container_defaults
from dynquota.admission.types import ResourceQuota
from dynquota.quantity import parse_quantity as q

NOW = 1_800_000_000.0


def pod(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:  # fmt: skip
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    container = {"name": "app", "image": "pause", "resources": resources}
    return {"metadata": {"name": "web-1", "namespace": "ns"},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def quota(name: str, hard: dict[str, str], used: dict[str, str], **spec: Any) -> ResourceQuota:
    return ResourceQuota.from_object({
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "spec": {"hard": hard, **spec},
        "status": {"hard": hard, "used": used},
    })  # fmt: skip


def test_one_key_admits_the_whole_copies_between_used_and_hard() -> None:
    assert copies_that_fit(q("1"), q("250m"), q("250m")) == 3
    assert copies_that_fit(q("1"), q("251m"), q("250m")) == 2
    assert copies_that_fit(q("10"), q("10"), q("1")) == 0
    assert copies_that_fit(q("10"), q("12"), q("1")) == 0  # used above hard
    assert copies_that_fit(q("1Gi"), q("0"), q("100Mi")) == 10
    assert copies_that_fit(q("10"), q("0"), q("0")) is None  # charged nothing: no bound


def test_every_quota_that_matches_bounds_the_pod_and_the_others_do_not() -> None:
    quotas = [
        quota("compute", {"requests.cpu": "2", "pods": "50"},
              {"requests.cpu": "500m", "pods": "4"}),
        quota("besteffort", {"pods": "1"}, {"pods": "1"}, scopes=["BestEffort"]),
        quota("objects", {"configmaps": "10"}, {"configmaps": "1"}),
    ]  # fmt: skip
    rooms = quota_rooms(quotas, pod({"cpu": "250m"}), NOW)
    assert rooms == [
        QuotaRoom("compute", True, None, (
            KeyRoom("pods", q("50"), q("4"), q("1")),
            KeyRoom("requests.cpu", q("2"), q("500m"), q("250m")),
        )),
        QuotaRoom("besteffort", False),
        QuotaRoom("objects", False),
    ]  # fmt: skip
    assert [r.fits for r in rooms] == [6, None, None]


def test_a_compute_quota_refuses_a_pod_that_does_not_state_the_resource() -> None:
    quotas = [quota("compute", {"requests.memory": "1Gi"}, {"requests.memory": "0"})]
    [room] = quota_rooms(quotas, pod({"cpu": "250m"}), NOW)
    assert room.problem == "failed quota: compute: must specify requests.memory for: app"
    assert room.fits == 0


def test_a_key_the_controller_has_not_counted_is_status_unknown() -> None:
    quotas = [quota("fresh", {"pods": "5"}, {})]
    [room] = quota_rooms(quotas, pod(), NOW)
    assert room.problem == "status unknown for quota: fresh, resources: pods"


def test_the_refusal_is_the_apiservers_text_for_the_first_pod_that_does_not_fit() -> None:
    quotas = [quota("compute", {"requests.cpu": "1"}, {"requests.cpu": "250m"})]
    the_pod = pod({"cpu": "250m"})
    assert refusal(quotas, the_pod, NOW, [(the_pod, 2)]) is None
    assert refusal(quotas, the_pod, NOW, [(the_pod, 3)]) == (
        'pods "web-1" is forbidden: exceeded quota: compute, requested: requests.cpu=250m, '
        "used: requests.cpu=1, limited: requests.cpu=1"
    )


def test_the_refusal_counts_what_earlier_workloads_were_charged() -> None:
    quotas = [quota("pods", {"pods": "3"}, {"pods": "0"})]
    small, big = pod({"cpu": "100m"}), pod({"cpu": "1"})
    assert refusal(quotas, big, NOW, [(small, 2), (big, 1)]) == (
        'pods "web-1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=3, '
        "limited: pods=3"
    )


LIMIT_RANGE = {
    "metadata": {"name": "defaults"},
    "spec": {"limits": [
        {"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
         "default": {"cpu": "500m", "memory": "128Mi"}},
        {"type": "Pod", "max": {"cpu": "4"}},
    ]},
}  # fmt: skip


def test_limit_range_defaults_fill_what_a_container_does_not_state() -> None:
    given = pod({"memory": "256Mi"}, {"memory": "256Mi"})
    given["spec"]["initContainers"] = [{"name": "init", "image": "pause"}]
    defaulted, parts = apply_limit_range_defaults(given, [LIMIT_RANGE])
    app, init = defaulted["spec"]["containers"][0], defaulted["spec"]["initContainers"][0]
    assert app["resources"] == {"requests": {"memory": "256Mi", "cpu": "100m"},
                                "limits": {"memory": "256Mi", "cpu": "500m"}}  # fmt: skip
    assert init["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"},
                                 "limits": {"cpu": "500m", "memory": "128Mi"}}  # fmt: skip
    assert parts == [
        "cpu request for container app",
        "cpu limit for container app",
        "cpu, memory request for init container init",
        "cpu, memory limit for init container init",
    ]
    assert defaulted["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: " + "; ".join(parts)
    )
    assert "annotations" not in given["metadata"]  # the input is not changed


def test_a_missing_request_is_the_limit_before_any_default() -> None:
    # SetDefaults_Pod runs at decode, before admission: the default request does not apply
    defaulted, parts = apply_limit_range_defaults(pod(limits={"cpu": "2"}), [LIMIT_RANGE])
    resources = defaulted["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "2", "memory": "64Mi"}
    assert resources["limits"] == {"cpu": "2", "memory": "128Mi"}
    assert parts == ["memory request for container app", "memory limit for container app"]


def test_an_earlier_limit_range_wins_and_other_item_types_give_no_default() -> None:
    first = {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "300m"}}]}}
    assert container_defaults(LIMIT_RANGE) == (
        {"cpu": "100m", "memory": "64Mi"},
        {"cpu": "500m", "memory": "128Mi"},
    )
    defaulted, _ = apply_limit_range_defaults(pod(), [first, LIMIT_RANGE])
    assert defaulted["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"
    unchanged, parts = apply_limit_range_defaults(pod(), [])
    assert parts == []
    assert unchanged == pod()
