"""Static checks of the chart and the CRD that need no binary: the generated files are up to date
(`make chart-generate`), the CRD agrees with the operator's pydantic models, values.yaml agrees
with its schema and with docs/configuration.md."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dynquota.policy.durations import DURATION_MESSAGE, DURATION_PATTERN
from dynquota.policy.models import (
    DEFAULT_PROFILES,
    TRACKED_RESOURCES,
    validate_label_key,
    validate_policy,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
CRD = ROOT / "crds" / "dynamicquotapolicies.yaml"
GENERATOR = ROOT / "hack" / "chart" / "generate.py"


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_generate", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_generation_is_idempotent() -> None:
    """The chart's CRD copy, values.schema.json and the values table of docs/configuration.md
    are what `make chart-generate` makes from crds/ and values.yaml (run it after editing
    either)."""
    assert [str(p) for p in _generator().stale(ROOT)] == []


def test_a_stale_generated_file_is_found(tmp_path: Path) -> None:
    for part in ("crds", "docs", "helm", "examples"):
        shutil.copytree(ROOT / part, tmp_path / part)
    (tmp_path / "dynquota").mkdir()
    shutil.copy(ROOT / "dynquota" / "__init__.py", tmp_path / "dynquota" / "__init__.py")
    generator = _generator()
    assert generator.stale(tmp_path) == []
    values = tmp_path / "helm" / "dynquota" / "values.yaml"
    values.write_text(values.read_text().replace("# -- Concurrent reconciles", "# -- Reconciles"))
    (tmp_path / "crds" / "dynamicquotapolicies.yaml").write_text("# edited\n")
    assert sorted(str(p) for p in generator.stale(tmp_path)) == [
        "docs/configuration.md",
        # the CRD's entry of the Artifact Hub annotation, and the README's CRD table
        "helm/dynquota/Chart.yaml",
        "helm/dynquota/README.md",
        "helm/dynquota/crds/dynamicquotapolicies.yaml",
        "helm/dynquota/values.schema.json",
    ]
    assert generator.main(["--root", str(tmp_path)]) == 0
    assert generator.stale(tmp_path) == []
    # the version lives in dynquota/__init__.py: a new one makes Chart.yaml and its README stale
    init = tmp_path / "dynquota" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "9.'))
    assert sorted(str(p) for p in generator.stale(tmp_path)) == [
        "helm/dynquota/Chart.yaml",
        "helm/dynquota/README.md",
    ]


def test_crd_duration_rule_is_the_operators_and_says_what_is_accepted() -> None:
    """Every duration field checks the operator's grammar with a CEL rule whose message says
    what is accepted (a ``pattern`` made the apiserver answer ``1d`` with the regex)."""
    spec = crd_schema()["properties"]["spec"]["properties"]
    profile = spec["resources"]["additionalProperties"]["properties"]
    override = spec["override"]["properties"]
    fields = {
        "upscaleCooldown": profile["upscaleCooldown"],
        "downscaleCooldown": profile["downscaleCooldown"],
        "override.ttl": override["ttl"],
        "override.minInterval": override["minInterval"],
    }
    for name, field in fields.items():
        assert "pattern" not in field, name
        first = field["x-kubernetes-validations"][0]
        assert first == {
            "rule": f"self.matches('{DURATION_PATTERN}')",
            "message": DURATION_MESSAGE,
        }, name


def resources_rules() -> list[dict[str, str]]:
    """The CEL rules on ``spec.resources`` (the map of profiles)."""
    rules: list[dict[str, str]] = crd_schema()["properties"]["spec"]["properties"]["resources"][
        "x-kubernetes-validations"
    ]
    return rules


def crd_accepts_resource_key(key: str) -> bool:
    """The CRD's CEL rule on the keys of ``spec.resources``, evaluated in Python: its regexes
    (RE2 syntax that Python's ``re`` reads alike), its list of refused ``count/`` keys and its
    ``kubernetes.io/`` test."""
    (rule,) = [r["rule"] for r in resources_rules() if r["rule"].startswith("self.all(k, size(k)")]
    standard, count, classes, extended = re.findall(r"k\.matches\(r'([^']*)'\)", rule)
    (refused,) = re.findall(r"!\(k in \[([^]]*)\]\)", rule)
    refused_keys = {k.strip().strip("'") for k in refused.split(",")}
    return len(key) <= 316 and (
        bool(re.search(standard, key))
        or (bool(re.search(count, key)) and key not in refused_keys)
        or bool(re.search(classes, key))
        or (
            bool(re.search(extended, key))
            and (
                "kubernetes.io/" not in key
                or key.startswith("requests.deviceclass.resource.kubernetes.io/")
            )
        )
    )


@pytest.mark.parametrize(
    "key",
    [
        *TRACKED_RESOURCES,
        "secrets", "services", "persistentvolumeclaims", "services.loadbalancers",
        "services.nodeports", "replicationcontrollers", "resourcequotas", "count/secrets",
        "count/jobs.batch", "count/widgets.example.com", "count/deployments.apps",
        "cpu", "memory", "requests.cpu", "limits.cpu", "requests.memory", "limits.memory",
        "ephemeral-storage", "requests.ephemeral-storage", "limits.ephemeral-storage",
        "hugepages-2Mi", "requests.hugepages-1Gi", "requests.storage",
        "gold.storageclass.storage.k8s.io/requests.storage",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
        "gpu.example.com.deviceclass.resource.k8s.io/devices",
        "requests.deviceclass.resource.kubernetes.io/gpu.example.com",
        "requests.nvidia.com/gpu", "requests.example.com/fpga_x",
        # refused by both
        "nvidia.com/gpu", "limits.nvidia.com/gpu", "count/events", "count/nodes",
        "count/namespaces", "storage", "secret", "requests.kubernetes.io/foo",
        "gold.storageclass.storage.k8s.io/limits.storage", "Secrets", "count/",
    ],
)  # fmt: skip
def test_crd_accepts_exactly_the_resource_keys_the_operator_counts(key: str) -> None:
    """The CEL rule on the keys agrees with keys.classify_static (the operator's check) on
    every family; the operator alone also refuses a count/ key naming a built-in kind that
    does not exist (count/deployment.apps), reported Valid=False."""
    operator_accepts = validate_policy(
        {"metadata": {"name": "p"}, "spec": {"resources": {key: {"maximum": 1}}}}
    )
    counted = operator_accepts.valid or "maximum" in (operator_accepts.reason or "")
    assert crd_accepts_resource_key(key) == counted, operator_accepts.reason


def test_only_the_operator_refuses_built_in_count_typos() -> None:
    assert crd_accepts_resource_key("count/deployment.apps")
    info = validate_policy(
        {
            "metadata": {"name": "p"},
            "spec": {"resources": {"count/deployment.apps": {"maximum": 1}}},
        }
    )
    assert info.reason == (
        "spec.resources: resource key not counted by the Kubernetes quota system: "
        "'count/deployment.apps': group 'apps' serves no namespaced resource 'deployment' "
        "(check the plural)"
    )


def test_crd_minimum_maximum_rules_use_the_built_in_defaults() -> None:
    """One CEL rule per tracked resource compares minimum and maximum after defaulting (an
    omitted bound takes the built-in default), with the numbers of DEFAULT_PROFILES."""
    rules = [r for r in resources_rules() if "messageExpression" in r and "? int(" in r["rule"]]
    assert [r["rule"].split(")", 1)[0] for r in rules] == [
        f"!has(self.{name}" for name in TRACKED_RESOURCES
    ]
    for rule, (name, p) in zip(rules, DEFAULT_PROFILES.items(), strict=True):
        text = " ".join(rule["rule"].split())
        assert f"(has(self.{name}.minimum) ? int(self.{name}.minimum) : {p.minimum})" in text
        assert f"(has(self.{name}.maximum) ? int(self.{name}.maximum) : {p.maximum})" in text
        assert re.findall(r"\b\d+\b", text) == [str(p.minimum), str(p.maximum)]
        message = " ".join(rule["messageExpression"].split())
        assert (
            f"'{name}: minimum must be less than or equal to maximum, which is omitted and "
            f"defaults to {p.maximum}'"
        ) in message
        assert (
            f"'{name}: maximum must be greater than or equal to minimum, which is omitted and "
            f"defaults to {p.minimum}'"
        ) in message


@functools.cache
def selector_key_rules() -> tuple[str, str, str]:
    """(matchExpressions key pattern, its CEL rule, the matchLabels keys' CEL rule)."""
    selector = crd_schema()["properties"]["spec"]["properties"]["namespaceSelector"]
    key = selector["properties"]["matchExpressions"]["items"]["properties"]["key"]
    ((labels_rule,),) = [selector["properties"]["matchLabels"]["x-kubernetes-validations"]]
    ((key_rule,),) = [key["x-kubernetes-validations"]]
    return key["pattern"], key_rule["rule"], labels_rule["rule"]


def crd_accepts_label_key(key: str) -> bool:
    """The CRD's checks of a selector key, in Python: length, prefix length, pattern."""
    pattern, _, _ = selector_key_rules()
    return 1 <= len(key) <= 317 and key.find("/") <= 253 and bool(re.fullmatch(pattern, key))


def test_crd_label_key_rules_are_one_rule() -> None:
    pattern, key_rule, labels_rule = selector_key_rules()
    assert key_rule == 'self.indexOf("/") <= 253'
    assert labels_rule == (
        f'self.all(k, size(k) <= 317 && k.indexOf("/") <= 253 && k.matches(r"{pattern}"))'
    )


LABEL_KEY_CHARS = "aZ09-_./"


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=LABEL_KEY_CHARS + " A\n", max_size=24),
        st.builds(
            lambda prefix, sep, name: "a" * prefix + sep + "b" * name,
            st.sampled_from([0, 1, 252, 253, 254, 300]),
            st.sampled_from(["/", "", "//"]),
            st.sampled_from([0, 1, 62, 63, 64]),
        ),
        st.builds(
            lambda a, b: a + "/" + b,
            st.text(alphabet=LABEL_KEY_CHARS, max_size=12),
            st.text(alphabet=LABEL_KEY_CHARS, max_size=12),
        ),
    )
)
def test_crd_accepts_exactly_the_label_keys_the_operator_accepts(key: str) -> None:
    """A selector key the CRD stores but the operator refuses would make the policy invalid
    and freeze every namespace it may govern (found by the bad-input test: a 64-character
    name or a 254-character prefix passed the CRD)."""
    try:
        validate_label_key(key)
    except ValueError:
        operator_accepts = False
    else:
        operator_accepts = True
    assert crd_accepts_label_key(key) == operator_accepts


def test_crd_documents_the_built_in_defaults() -> None:
    description = " ".join(
        crd_schema()["properties"]["spec"]["properties"]["resources"]["description"].split()
    )
    for name, p in DEFAULT_PROFILES.items():
        d = p.to_crd()
        expected = (
            f"{d['bufferPercent']}, {d['minimum']}, {d['maximum']}, "
            f"{d['upscaleCooldown']}, {d['downscaleCooldown']}"
        )
        if name == "pods":
            expected = (
                f"bufferPercent {d['bufferPercent']}, minimum {d['minimum']}, maximum "
                f"{d['maximum']}, upscaleCooldown {d['upscaleCooldown']}, downscaleCooldown "
                f"{d['downscaleCooldown']}"
            )
        assert f"{name}: {expected}" in description


def test_values_default_policy_is_valid_and_equals_the_built_in_profiles() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    policy = values["defaultPolicy"]
    assert policy["resources"] == {name: p.to_crd() for name, p in DEFAULT_PROFILES.items()}
    info = validate_policy(
        {
            "metadata": {"name": policy["name"]},
            "spec": {
                "namespaceSelector": policy["namespaceSelector"],
                "priority": policy["priority"],
                # null: the template renders true on install or the live value (a boolean).
                "dryRun": True if policy["dryRun"] is None else policy["dryRun"],
                "resources": policy["resources"],
            },
        }
    )
    assert policy["dryRun"] is None
    assert info.reason is None
    assert info.valid


def leaf_paths(node: object, prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml: maps are walked, except empty ones and lists (leaves)."""
    if isinstance(node, dict) and node:
        out: list[str] = []
        for key, value in node.items():
            out += leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    return [prefix]


# Maps whose content is Kubernetes' own (resources, security contexts, profiles): the
# reference documents the map, not each Kubernetes field in it.
OPAQUE = (
    "resources.",
    "podSecurityContext.",
    "securityContext.",
    "cleanupOnUninstall.resources.",
    "defaultPolicy.resources.",
    "metrics.grafanaDashboard.labels.",
)


def test_every_value_is_in_the_configuration_reference() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    reference = (ROOT / "docs" / "configuration.md").read_text()
    reference = reference.split("## Helm values", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", reference, re.MULTILINE))
    expected = set()
    for path in leaf_paths(values):
        opaque = next((p for p in OPAQUE if path.startswith(p)), None)
        expected.add(opaque.rstrip(".") if opaque else path)
    assert sorted(expected - documented) == []
    assert sorted(documented - expected) == []


def walk_schema(schema: dict[str, Any], values: object, path: str = "") -> list[str]:
    """Paths where values.yaml has a key the schema does not declare, or a declared object
    without additionalProperties: false."""
    problems: list[str] = []
    if schema.get("type") == "object" and "properties" in schema:
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path or '/'}: additionalProperties is not false")
        if isinstance(values, dict):
            for key, value in values.items():
                if key not in schema["properties"]:
                    problems.append(f"{path}/{key}: not in the schema")
                else:
                    problems += walk_schema(schema["properties"][key], value, f"{path}/{key}")
    return problems


def test_schema_is_draft_07_closed_and_covers_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert walk_schema(schema, values) == []
    # Every top-level value is declared, and nothing else is.
    assert sorted(set(schema["properties"]) - {"global"}) == sorted(values)


@pytest.mark.parametrize("name", sorted(p.name for p in (CHART / "ci").glob("*.yaml")))
def test_ci_values_use_only_declared_keys(name: str) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "ci" / name).read_text())
    assert walk_schema(schema, values) == []


def test_values_yaml_comments_every_top_level_key() -> None:
    """A top-level key has a comment right above it, or its first child has one."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[A-Za-z]\w*:", line):
            above, below = lines[i - 1].strip(), lines[i + 1].strip()
            assert above.startswith("#") or below.startswith("#"), f"values.yaml:{i + 1}: {line}"


DOCS = ("install", "configuration", "runbook", "metrics", "upgrade", "troubleshooting",
        "known-gaps", "chart")  # fmt: skip


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS)
def test_doc_links_resolve(doc: str) -> None:
    """Every relative link of the user docs names an existing file and heading."""
    text = (ROOT / "docs" / f"{doc}.md").read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (ROOT / "docs" / path) if path else ROOT / "docs" / f"{doc}.md"
        assert linked.exists(), f"{doc}.md links to missing {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.MULTILINE)
            assert anchor in {slug(h) for h in headings}, f"{doc}.md: no heading for {target}"
