"""Hostile and malformed input against the real apiserver, with the operator running (issue 10).

Hypothesis generates batches of writes (derandomized, no database, no shrinking: each example
mutates a real cluster, so a replay is not the same experiment):

- tenant annotations on managed quotas and on a foreign (unlabelled) quota named ``dynquota``:
  ``dynquota.io/override``, ``-granted-at``, ``-expires-at``, of any size up to past the
  apiserver's 256 KiB annotation limit and any charset;
- DynamicQuotaPolicy specs, most refused by the CRD, some stored;
- ``dynquota.io/managed`` namespace labels with odd values;
- bogus ``dynquota.io/kill-switch`` values on ``kube-system`` (never a valid ``true``).

After each batch the test waits (with deadlines, never a fixed delay) for the operator's
reaction to the batch's final state, and checks the safety invariants; violations are
collected and asserted at the end, so one failure does not hide the others:

- every rejection is an apiserver refusal (4xx with a message that says what is wrong; a
  policy refusal names the policy) or a Warning Event with the exact reason about the object
  (``OverrideRejected``, ``KillSwitchInvalid``, ``ManagedLabelIgnored``, ``PolicyInvalid``;
  ``StateRepaired`` and ``QuotaRemoved`` are counted). The operator posts such a Warning once
  per cause and hour, not once per value, so the Event must name one of the values written
  there (a nonce at the start of tagged values);
- every spec the apiserver stores validates in the operator (else it would freeze namespaces);
- the operator thread lives; managed quotas are never deleted or replaced (bogus kill-switch
  values included: no kill-switch deletion); ``hard`` never exceeds the governing maximum; the
  foreign quota is never written (uid, spec, no ``dynquota`` field manager);
- forged override stamps never keep an override past a grant made now (issue 10, case 6);
- at the end a new canary namespace gets its exact quota; RSS growth, the Warning
  de-duplication cache (per entry and in all) and every logged line stay bounded (tenant input
  bounded to ~256 characters with a hash, case 5).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from dynquota.names import GROUP, PLURAL, VERSION
from dynquota.policy import parse_time, validate_policy
from dynquota.quantity import parse_quantity
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import WaitTimeoutError, wait_until

StartOperator = Callable[..., OperatorThread]

OVERRIDE = "dynquota.io/override"
GRANTED_AT = "dynquota.io/override-granted-at"
EXPIRES_AT = "dynquota.io/override-expires-at"
KILL_SWITCH = "dynquota.io/kill-switch"
MANAGED_LABEL = "dynquota.io/managed"
OVERRIDE_KEYS = (OVERRIDE, GRANTED_AT, EXPIRES_AT)
ANNOTATIONS_LIMIT = 256 * 1024  # bytes, keys + values (apimachinery ValidateAnnotationsSize)

# The governing policy of every target namespace (exact numbers, so the canary is exact).
PODS = {"bufferPercent": 40, "minimum": 5, "maximum": 40, "upscaleCooldown": "1s",
        "downscaleCooldown": "1h"}  # fmt: skip
CONFIGMAPS = {"bufferPercent": 40, "minimum": 8, "maximum": 60, "upscaleCooldown": "1s",
              "downscaleCooldown": "1h"}  # fmt: skip
BASE_HARD = {"pods": "5", "configmaps": "8"}
OVERRIDE_TTL = 3600  # seconds (the operator's override_ttl below)

EXAMPLES = 32  # hypothesis examples (batches)
BATCH = (10, 14)  # writes per batch: at least 300 in all
MIN_WRITES = 300
BUDGET = 90.0  # seconds for the batches; past it the fences are skipped (and reported)
LOG_LINE_LIMIT = 2048  # characters of one logged message
WARN_ENTRY_LIMIT = 2048  # characters of one Warning de-duplication cache entry
WARN_CACHE_LIMIT = 64 * 1024  # characters of the whole cache (340 measured; 127,123 unbounded)
RSS_GROWTH_LIMIT = 48 * 2**20  # bytes (18.7 MiB measured; 30.3 with tenant input unbounded)

# -- strategies ------------------------------------------------------------------------------

NASTY = [
    "", " ", "max ", " max", "MAX", "mAx", "max\n", "max\x00", "\uff4d\uff41\uff58",
    "m\u0430x", "\u202emax",
    "true", "TRUE ", "false", "1", "yes", "null", "None", "{}", "[]", "max,max", "max=max",
    "<script>alert(1)</script>", "'; DROP TABLE quotas; --", "%s%s%n", "${jndi:ldap://x/a}",
    "\t\r\n", "😀" * 10, "\\x00", '"', "'", "\x7f\x1b[31m",
    "2099-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z", "2026-13-45T25:61:61Z", "2026-11-30T03:30:00+23:59",
    "2026-11-30T03:30:00-99:99", "2026-11-30", "2026-11-30T03:30:00", "1e308", "-1", "NaN",
]  # fmt: skip


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Well-formed times around now (past, near future, far future up to year 2300).
relative_times = st.integers(-(10**9), 10**10).map(lambda d: _rfc3339(time.time() + d))
# Big values: a head and one character repeated (1 to 4 bytes in UTF-8); the sizes reach
# past the 256 KiB limit.
big_values = st.builds(
    lambda head, unit, n: head + unit * n,
    st.text(max_size=16),
    st.sampled_from(["a", "é", "€", "😀", "\x00", "\n", " ", "m"]),
    st.integers(0, 70_000) | st.sampled_from([65_536, 131_072, 262_000, 262_144, 300_000]),
)
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=400), big_values, relative_times)


@dataclass(frozen=True)
class AnnotateQuota:
    """Merge-patch the override annotations of the quota in target ``index`` (``None``
    removes a key); ``tag`` prefixes the override value with a unique nonce."""

    index: int
    changes: dict[str, str | None]
    tag: bool


@dataclass(frozen=True)
class KillSwitch:
    value: str | None
    tag: bool


@dataclass(frozen=True)
class ManagedLabel:
    index: int
    value: str | None


@dataclass(frozen=True)
class Policy:
    spec: dict[str, Any]


annotate_ops = st.builds(
    AnnotateQuota,
    st.integers(0, 3),  # 0..2 managed, 3 the foreign quota
    st.dictionaries(st.sampled_from(OVERRIDE_KEYS), st.none() | values, min_size=1, max_size=3),
    st.booleans(),
)
kill_switch_ops = st.builds(
    KillSwitch,
    st.none() | values.filter(lambda v: v.lower() != "true"),
    st.booleans(),
)
label_values = st.one_of(
    st.none(),
    st.sampled_from(["false", "False", "FALSE", "fAlSe", "true", "True", "no", "0", "off", "",
                     "n", "false-1", "f.a.l.s.e", "x" * 63, "x" * 64, "-false", "false_"]),
    st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True),
    st.text(max_size=70),
)  # fmt: skip
label_ops = st.builds(ManagedLabel, st.integers(0, 1), label_values)

junk = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12), st.just([]), st.just({}),
)  # fmt: skip
numbers = st.one_of(
    st.integers(-10, 5000),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63)]),
)
durations = st.one_of(
    st.sampled_from(["0s", "90s", "5m", "1h30m", "8760h", "8761h", "525600m", "31536001s", "",
                     "1d", "5x", "-5m", "1.5h", "5m1h", "99999999999999999999h", "0h0m0s",
                     "0000000000001h", "1h\n", " 1h"]),
    st.text(alphabet="0123456789hms", max_size=12),
    numbers,
)  # fmt: skip
profiles = st.fixed_dictionaries(
    {},
    optional={
        "bufferPercent": numbers | junk,
        "minimum": numbers | junk | st.sampled_from(["10", "1k"]),
        "maximum": numbers | junk | st.sampled_from(["10", "1k"]),
        "upscaleCooldown": durations | junk,
        "downscaleCooldown": durations | junk,
        "surplus": junk,
    },
)
resource_keys = st.sampled_from(
    ["pods", "configmaps", "secrets", "count/nodes", "PODS", "pods ", "", "requests.cpu"]
) | st.text(max_size=12)
expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from(
            ["a", "dq-x", "a/b/c", "", "x" * 63, "x" * 64, "p" * 253 + "/n", "p" * 254 + "/n"]
        )
        | st.text(max_size=8),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "in", "Foo"]),
    },
    optional={"values": st.lists(st.text(max_size=8), max_size=3)},
)
specs = st.fixed_dictionaries(
    {"resources": st.dictionaries(resource_keys, profiles | junk, max_size=3)},
    optional={
        "priority": numbers | junk,
        "dryRun": st.booleans() | junk,
        "matchExpressions": st.lists(expressions, max_size=2),
    },
)
policy_ops = st.builds(Policy, specs)

batches = st.lists(
    st.one_of(annotate_ops, annotate_ops, kill_switch_ops, label_ops, policy_ops),
    min_size=BATCH[0],
    max_size=BATCH[1],
)


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What was written and what came back."""

    writes: int = 0
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    accepted: collections.Counter[str] = field(default_factory=collections.Counter)
    violations: list[str] = field(default_factory=list)
    refusal_samples: dict[str, str] = field(default_factory=dict)
    policy_maxima: dict[str, int] = field(
        default_factory=lambda: {"pods": PODS["maximum"], "configmaps": CONFIGMAPS["maximum"]}
    )
    nonce: int = 0
    fenced: int = 0
    largest: int = 0  # bytes of the largest value the apiserver accepted
    rejected: dict[tuple[str, str], list[str | None]] = field(default_factory=dict)
    """(object, Warning reason) -> a needle per rejected value written there (its nonce, or
    for a label value the quoted value; None when the value cannot be told apart)."""

    def expect(self, about: str, reason: str, needle: str | None) -> None:
        self.rejected.setdefault((about, reason), []).append(needle)

    def accept(self, kind: str, *texts: str | None) -> None:
        self.writes += 1
        self.accepted[kind] += 1
        for text in texts:
            if text is not None:
                self.largest = max(self.largest, len(text.encode()))

    def tag(self) -> str:
        self.nonce += 1
        return f"bad{self.nonce:05d}~"

    def violate(self, text: str) -> None:
        self.violations.append(text[:600])


class LineLengths(logging.Handler):
    """Keeps the length (and level) of every record of the operator's and kopf's loggers."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.longest = 0
        self.longest_head = ""
        self.errors: list[str] = []
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.count += 1
        if len(message) > self.longest:
            self.longest, self.longest_head = len(message), message[:120]
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {message[:300]}")


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def warning_cache_entries(op: OperatorThread) -> list[str]:
    """The operator's Warning de-duplication cache, one text per entry (its key and value).

    Found as the ``_warned`` mapping of the operator today; the lead's rewrite may move it,
    then this lookup fails loudly rather than passing vacuously.
    """
    assert op.runtime is not None
    holders = [op.runtime.operator, *vars(op.runtime.operator).values()]
    for holder in holders:
        cache = getattr(holder, "_warned", None)
        if cache is not None:
            return [repr(k) + repr(v) for k, v in list(cache.items())]
    raise AssertionError("the operator's Warning de-duplication cache (_warned) was not found")


def event_messages(cluster: OperatorCluster, ns: str, reason: str) -> list[str]:
    return [e.message or "" for e in cluster.events(ns, reason)]


def nonce_of(value: str) -> str | None:
    """The nonce a tagged value starts with (``bad00042~``), else ``None``."""
    head = value[:10]
    return head if head.startswith("bad") and head.endswith("~") else None


def is_max(value: str) -> bool:
    return value.lower() == "max"


def refusal(ledger: Ledger, kind: str, exc: ApiException) -> str:
    """An apiserver refusal: a 4xx with a Status message that says what is wrong; returns
    the message."""
    ledger.writes += 1
    try:
        message = str(json.loads(exc.body or "{}").get("message") or "")
    except ValueError:
        message = ""
    key = f"{kind} {exc.status}"
    ledger.refused[key] += 1
    ledger.refusal_samples.setdefault(key, message[:300])
    if not (400 <= int(exc.status or 0) < 500) or len(message) < 10:
        ledger.violate(f"{kind}: unclear refusal {exc.status} {exc.reason}: {message[:200]!r}")
    return message


@pytest.mark.timeout(400)
def test_hostile_input_is_refused_or_reported_never_acted_on(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator
) -> None:
    cluster, core = op_cluster, op_cluster.core
    ledger = Ledger()
    target = {**scope, "dq-role": "target"}
    hostile = {**scope, "dq-role": "hostile"}
    cluster.policy("bad-input-base", target, pods=PODS, configmaps=CONFIGMAPS)
    managed = [cluster.new_namespace(target) for _ in range(3)]
    labelled = [cluster.new_namespace(target) for _ in range(2)]
    hostile_ns = cluster.new_namespace(hostile)
    foreign = cluster.new_namespace(scope)
    core.create_namespaced_resource_quota(
        foreign, {"metadata": {"name": "dynquota"}, "spec": {"hard": {"pods": "3"}}}
    )
    core.patch_namespace(foreign, {"metadata": {"labels": target}})
    lines = LineLengths()
    loggers = [logging.getLogger("dynquota"), logging.getLogger("kopf")]
    for logger in loggers:
        logger.addHandler(lines)
    try:
        op = start_operator(override_ttl=f"{OVERRIDE_TTL}s")
        for ns in managed + labelled:
            cluster.wait_hard(ns, BASE_HARD, enforced=False, timeout=60)
        uids = {ns: cluster.quota(ns).metadata.uid for ns in managed}
        foreign_quota = cluster.quota(foreign)
        cluster.wait_event(foreign, "ForeignQuota")
        rss_start = rss_bytes()
        started = time.monotonic()

        def alive() -> bool:
            return op._thread.is_alive() and op._error is None

        def fence(what: str, check: Callable[[], bool], timeout: float = 15) -> None:
            if time.monotonic() - started > BUDGET:
                ledger.violate(f"time budget spent: not waited for {what}")
                return
            ledger.fenced += 1
            try:
                wait_until(check, what, timeout=timeout, interval=0.05)
            except WaitTimeoutError as exc:
                ledger.violate(f"no reaction: {exc}")

        def invariants(when: str) -> None:
            if not alive():
                ledger.violate(f"{when}: the operator thread died: {op._error!r}")
            for ns in managed:
                quota = cluster.quota(ns)
                if quota is None or quota.metadata.uid != uids[ns]:
                    ledger.violate(f"{when}: the managed quota of {ns} was deleted or replaced")
            for ns in [*managed, *labelled, hostile_ns]:
                quota = cluster.quota(ns)
                if quota is None or not quota.metadata.labels:
                    continue
                for resource, bound in ledger.policy_maxima.items():
                    text = (quota.spec.hard or {}).get(resource)
                    # the apiserver canonicalises quantities (5000 reads back as 5k)
                    if text is not None and parse_quantity(text).ceil() > bound:
                        ledger.violate(f"{when}: {ns} hard {resource}={text} above maximum {bound}")
            now = cluster.quota(foreign)
            if (
                now is None
                or now.metadata.uid != foreign_quota.metadata.uid
                or now.spec.hard != {"pods": "3"}
                or "dynquota" in {f.manager for f in now.metadata.managed_fields or []}
            ):
                ledger.violate(f"{when}: the foreign quota in {foreign} was written by dynquota")
            deletes = op.sample("dynquota_quota_deletions_total", {"cause": "kill-switch"})
            if deletes:
                ledger.violate(f"{when}: {deletes:g} kill-switch deletions")

        def run_batch(batch: list[Any]) -> None:
            policies: list[str] = []
            invalid: list[str] = []
            for op_ in batch:
                if isinstance(op_, AnnotateQuota):
                    ns = (*managed, foreign)[op_.index]
                    changes = dict(op_.changes)
                    if op_.tag and changes.get(OVERRIDE) is not None:
                        changes[OVERRIDE] = ledger.tag() + str(changes[OVERRIDE])
                    try:
                        core.patch_namespaced_resource_quota(
                            "dynquota", ns, {"metadata": {"annotations": changes}}
                        )
                    except ApiException as exc:
                        refusal(ledger, "quota annotations", exc)
                    else:
                        ledger.accept("quota annotations", *changes.values())
                        request = changes.get(OVERRIDE)
                        if request is not None and (ns == foreign or not is_max(request)):
                            ledger.expect(ns, "OverrideRejected", nonce_of(request))
                elif isinstance(op_, KillSwitch):
                    value = op_.value
                    if op_.tag and value is not None:
                        value = ledger.tag() + value
                    try:
                        cluster.kill_switch(value)
                    except ApiException as exc:
                        refusal(ledger, "kill switch", exc)
                    else:
                        ledger.accept("kill switch", value)
                        if value is not None and value.lower() not in ("true", "false"):
                            ledger.expect("kube-system", "KillSwitchInvalid", nonce_of(value))
                elif isinstance(op_, ManagedLabel):
                    ns = labelled[op_.index]
                    try:
                        core.patch_namespace(
                            ns, {"metadata": {"labels": {MANAGED_LABEL: op_.value}}}
                        )
                    except ApiException as exc:
                        refusal(ledger, "namespace label", exc)
                    else:
                        ledger.accept("namespace label", op_.value)
                        if op_.value is not None and op_.value.lower() not in ("true", "false"):
                            ledger.expect(ns, "ManagedLabelIgnored", f'"{op_.value}"')
                else:
                    name = f"bad-{uuid.uuid4().hex[:8]}"
                    spec = dict(op_.spec)
                    selector: dict[str, Any] = {"matchLabels": hostile}
                    if "matchExpressions" in spec:
                        selector["matchExpressions"] = spec.pop("matchExpressions")
                    body = {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "DynamicQuotaPolicy",
                        "metadata": {"name": name},
                        "spec": {**spec, "namespaceSelector": selector},
                    }
                    try:
                        created = cluster.custom.create_cluster_custom_object(
                            GROUP, VERSION, PLURAL, body
                        )
                    except ApiException as exc:
                        message = refusal(ledger, "policy", exc)
                        prefix = f'DynamicQuotaPolicy.dynquota.io "{name}" is invalid: '
                        if not message.startswith(prefix):
                            ledger.violate(f"policy refusal without its name: {message:.300}")
                    else:
                        ledger.accept("policy")
                        policies.append(name)
                        info = validate_policy(created)
                        if not info.valid:
                            invalid.append(name)
                            # The CRD must refuse what the operator would freeze on.
                            ledger.violate(
                                f"CRD stored a spec the operator finds invalid: "
                                f"{json.dumps(created['spec'])[:300]}: {info.reason}"
                            )
                        elif info.spec is not None:
                            for resource, profile in info.spec.resources.items():
                                ledger.policy_maxima[resource] = max(
                                    ledger.policy_maxima.get(resource, 0), profile.maximum
                                )
            fence_batch(policies, invalid)
            invariants("after a batch")
            for name in policies:
                cluster.delete_policy(name)

        def warned(about: str, reason: str) -> Callable[[], bool]:
            """A Warning ``reason`` about ``about`` exists; when every rejected value written
            there can be told apart, it names one of them. (The operator may post one such
            Warning per cause and hour, not one per value: the first value it saw is named.)"""
            needles = ledger.rejected.get((about, reason), [])
            named = [n for n in needles if n is not None]
            kubesystem = about == "kube-system"

            def check() -> bool:
                if kubesystem or about in labelled:
                    events = [
                        e.message or ""
                        for e in cluster.events("default", reason)
                        if e.involved_object.kind == "Namespace" and e.involved_object.name == about
                    ]
                else:
                    events = event_messages(cluster, about, reason)
                if not events:
                    return False
                return len(named) < len(needles) or any(n in m for m in events for n in named)

            return check

        def fence_batch(policies: list[str], invalid: list[str]) -> None:
            """Wait for the operator's reaction to the batch's final state."""
            for ns in (*managed, foreign):
                value = (cluster.quota(ns).metadata.annotations or {}).get(OVERRIDE)
                if value is not None and (ns == foreign or not is_max(value)):
                    fence(f"OverrideRejected about {ns}", warned(ns, "OverrideRejected"))
            value = (core.read_namespace("kube-system").metadata.annotations or {}).get(KILL_SWITCH)
            if value is not None and value.lower() not in ("true", "false"):
                fence("KillSwitchInvalid", warned("kube-system", "KillSwitchInvalid"))
            for ns in labelled:
                value = (core.read_namespace(ns).metadata.labels or {}).get(MANAGED_LABEL)
                if value is not None and value.lower() == "false":
                    fence(f"{ns} ({value}) unmanaged", lambda ns=ns: cluster.quota(ns) is None)
                    continue
                fence(f"{ns} ({value}) managed", lambda ns=ns: cluster.quota(ns) is not None)
                if value is not None and value.lower() != "true":
                    fence(f"ManagedLabelIgnored about {ns}", warned(ns, "ManagedLabelIgnored"))
            for name in policies:

                def reported(name: str = name) -> bool:
                    obj = cluster.get_policy(name)
                    generation = obj["metadata"]["generation"]
                    return any(
                        c["type"] == "Valid" and c.get("observedGeneration") == generation
                        for c in (obj.get("status") or {}).get("conditions") or []
                    )

                fence(f"status of policy {name}", reported)
            for name in invalid:
                fence(
                    f"PolicyInvalid about {name}",
                    lambda name=name: any(
                        e.involved_object.name == name
                        for e in cluster.events("default", "PolicyInvalid")
                    ),
                )

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
                HealthCheck.large_base_example,
            ],
        )
        @given(batches)
        def run(batch: list[Any]) -> None:
            run_batch(batch)

        run()
        elapsed = time.monotonic() - started

        # Forged override stamps never keep an override past a grant made now (case 6): the
        # batches' final state, and then the plain forgery on a managed quota.
        forged = {OVERRIDE: "max", GRANTED_AT: "2099-01-01T00:00:00Z",
                  EXPIRES_AT: "2099-01-08T00:00:00Z"}  # fmt: skip
        core.patch_namespaced_resource_quota(
            "dynquota", managed[0], {"metadata": {"annotations": forged}}
        )
        ledger.writes += 1
        for ns in managed:

            def bounded(ns: str = ns) -> bool:
                ann = cluster.annotations(ns)
                if ann.get(GRANTED_AT) == forged[GRANTED_AT]:
                    return False
                expires = ann.get(EXPIRES_AT)
                try:
                    return expires is None or parse_time(expires) <= time.time() + OVERRIDE_TTL
                except ValueError:
                    return False

            try:
                wait_until(bounded, f"override of {ns} ends within the TTL", timeout=15)
            except WaitTimeoutError:
                state = {
                    k: v[:60] for k, v in cluster.annotations(ns).items() if k in OVERRIDE_KEYS
                }
                ledger.violate(f"forged override: {ns} still has {state} after 15 s")

        # Afterwards: a canary namespace gets its exact quota.
        cluster.kill_switch(None)
        for ns in (*managed, foreign):
            core.patch_namespaced_resource_quota(
                "dynquota", ns, {"metadata": {"annotations": dict.fromkeys(OVERRIDE_KEYS)}}
            )
        canary = cluster.new_namespace(target)
        try:
            cluster.wait_hard(canary, BASE_HARD, timeout=30)
        except WaitTimeoutError as exc:
            ledger.violate(f"canary: {exc}")
        invariants("at the end")
        rss_growth = rss_bytes() - rss_start
        entries = warning_cache_entries(op)
    finally:
        for logger in loggers:
            logger.removeHandler(lines)

    events: collections.Counter[str] = collections.Counter()
    mine = {*managed, *labelled, hostile_ns, foreign, canary}
    for ns in mine:
        for event in cluster.events(ns):
            if event.type == "Warning":
                events[event.reason] += 1
    for event in cluster.events("default"):
        about = event.involved_object.name or ""
        if event.type == "Warning" and (
            about in mine or about == "kube-system" or about.startswith("bad-")
        ):
            events[event.reason] += 1
    longest_entry = max((len(e) for e in entries), default=0)
    print(
        f"\nbad input: {ledger.writes} writes in {elapsed:.1f} s ({EXAMPLES} batches, "
        f"{ledger.fenced} reactions awaited); accepted {dict(ledger.accepted)}, the largest "
        f"value {ledger.largest} bytes; refused {dict(ledger.refused)}"
    )
    for key, sample in sorted(ledger.refusal_samples.items()):
        print(f"  refused {key}: {sample[:160]!r}")
    print(f"  Warning Events by reason: {dict(sorted(events.items()))}")
    print(
        f"  RSS growth {rss_growth / 2**20:.1f} MiB; Warning cache {len(entries)} entries, "
        f"{sum(map(len, entries))} characters, longest {longest_entry}; log lines "
        f"{lines.count}, longest {lines.longest} characters ({lines.longest_head[:60]!r}...)"
    )
    for violation in ledger.violations[:40]:
        print(f"  VIOLATION {violation}")

    # Every check, reported together (one failing does not hide the others).
    failures = [
        f"only {ledger.writes} writes (< {MIN_WRITES})" if ledger.writes < MIN_WRITES else "",
        f"{len(ledger.violations)} invariant violations (VIOLATION lines above)"
        if ledger.violations
        else "",
        "no OverrideRejected Event" if not events["OverrideRejected"] else "",
        "no ForeignQuota Event" if not events["ForeignQuota"] else "",
        f"ERROR log records: {lines.errors[:5]}" if lines.errors else "",
        f"a logged line of {lines.longest} characters (> {LOG_LINE_LIMIT}): tenant input "
        f"logged unbounded ({lines.longest_head[:80]!r}...)"
        if lines.longest > LOG_LINE_LIMIT
        else "",
        f"a Warning de-duplication cache entry of {longest_entry} characters (> "
        f"{WARN_ENTRY_LIMIT}): tenant input kept unbounded"
        if longest_entry > WARN_ENTRY_LIMIT
        else "",
        f"the Warning de-duplication cache holds {sum(map(len, entries))} characters (> "
        f"{WARN_CACHE_LIMIT})"
        if sum(map(len, entries)) > WARN_CACHE_LIMIT
        else "",
        f"RSS grew {rss_growth / 2**20:.1f} MiB (> {RSS_GROWTH_LIMIT / 2**20:.0f})"
        if rss_growth > RSS_GROWTH_LIMIT
        else "",
    ]
    for failure in failures:
        if failure:
            print(f"  FAILED CHECK {failure}")
    assert [f for f in failures if f] == []


@pytest.fixture(autouse=True)
def _no_leftovers(op_cluster: OperatorCluster) -> Iterator[None]:
    """Hostile policies are deleted whatever happens (the scope fixture deletes the rest)."""
    yield
    for item in op_cluster.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        if item["metadata"]["name"].startswith("bad-"):
            op_cluster.delete_policy(item["metadata"]["name"])
