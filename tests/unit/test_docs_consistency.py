"""The configuration reference (docs/configuration.md) in step with what it describes: the chart's
values (helm/dynquota/values.yaml), the operator's ``DYNQUOTA_*`` Settings, and the
DynamicQuotaPolicy CRD schema (both copies). Adding a value, a setting or a CRD field without
documenting it, or documenting one that does not exist, fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynquota.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
VALUES = ROOT / "helm" / "dynquota" / "values.yaml"
CRDS = [
    ROOT / "crds" / "dynamicquotapolicies.yaml",
    *sorted((ROOT / "helm" / "dynquota" / "crds").glob("*.yaml")),
]


def section(text: str, heading: str) -> str:
    """The text under the Markdown heading ``heading`` (any level) up to the next heading of the
    same or a higher level. Raises AssertionError when the heading is missing."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.MULTILINE)
    assert match, f"heading {heading!r} not found"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def table_keys(text: str) -> list[str]:
    """The backticked first cell of every row of the Markdown tables in ``text``."""
    return re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE)


def value_paths(node: Any, prefix: str = "") -> dict[str, Any]:
    """Every key path of the values tree (``a.b.c``) mapped to its value, maps included."""
    paths: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, child in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths[path] = child
            paths.update(value_paths(child, path))
    return paths


def leaves(paths: dict[str, Any]) -> list[str]:
    """Paths whose value is not a non-empty map (what a user sets)."""
    return [p for p, v in paths.items() if not (isinstance(v, dict) and v)]


def covered(path: str, documented: set[str]) -> bool:
    """``path`` or one of its ancestors is documented (a map documented as a whole)."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in documented for i in range(1, len(parts) + 1))


@pytest.fixture(scope="module")
def reference() -> str:
    return CONFIGURATION.read_text()


@pytest.fixture(scope="module")
def values_table(reference: str) -> list[str]:
    return table_keys(section(reference, "Helm values"))


def test_every_chart_value_is_documented(values_table: list[str]) -> None:
    paths = value_paths(yaml.safe_load(VALUES.read_text()))
    missing = [p for p in leaves(paths) if not covered(p, set(values_table))]
    assert missing == [], f"chart values missing from docs/configuration.md: {missing}"


def test_every_documented_value_exists(values_table: list[str]) -> None:
    paths = value_paths(yaml.safe_load(VALUES.read_text()))
    unknown = [k for k in values_table if k not in paths]
    assert unknown == [], f"docs/configuration.md documents values not in values.yaml: {unknown}"
    assert len(values_table) == len(set(values_table)), "a value is documented twice"


def test_documented_defaults_match_scalar_values(values_table: list[str], reference: str) -> None:
    """A scalar value's Default cell shows the value itself (``20``, ``INFO``, ``""``...)."""
    paths = value_paths(yaml.safe_load(VALUES.read_text()))
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", section(reference, "Helm values"), re.M))
    wrong = []
    for key in values_table:
        value = paths[key]
        if isinstance(value, dict | list):
            continue
        shown = (
            '""' if value == "" else "null" if value is None
            else str(value).lower() if isinstance(value, bool) else value
        )  # fmt: skip
        if f"`{shown}`" not in rows[key]:
            wrong.append(f"{key}: values.yaml {shown!r}, docs {rows[key].strip()!r}")
    assert wrong == []


def test_every_setting_is_documented(reference: str) -> None:
    env = {f"DYNQUOTA_{name.upper()}" for name in Settings.model_fields}
    missing = sorted(e for e in env if f"`{e}`" not in reference)
    assert missing == [], f"Settings not in docs/configuration.md: {missing}"
    mentioned = set(re.findall(r"`(DYNQUOTA_[A-Z_]+)`", reference))
    # The test-bed variable is documented in docs/controlplane.md, not read by Settings.
    unknown = sorted(mentioned - env - {"DYNQUOTA_CONTROLPLANE_ASSETS"})
    assert unknown == [], f"docs/configuration.md names settings that do not exist: {unknown}"


def schema_fields(node: dict[str, Any], prefix: str) -> list[str]:
    """Field paths of an OpenAPI schema: ``spec.priority``, ``spec.resources.*.minimum``..."""
    fields = []
    for key, child in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        fields.append(path)
        fields += schema_fields(child, path)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        fields += schema_fields(extra, f"{prefix}.*")
    return fields


@pytest.mark.parametrize("crd_file", CRDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_crd_field_is_in_the_policy_reference(reference: str, crd_file: Path) -> None:
    """Top-level spec/status fields are rows of the kind's table (DynamicQuotaPolicy,
    QuotaBudget); profile fields rows of the
    profile table; selector and condition sub-fields are Kubernetes' own types and skipped."""
    (version,) = yaml.safe_load(crd_file.read_text())["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    kind = yaml.safe_load(crd_file.read_text())["spec"]["names"]["kind"]
    policy = section(reference, kind)
    policy_rows = {k.split("[")[0] for k in table_keys(policy)}
    profile_rows = set(table_keys(section(reference, "Resource profile")))
    missing = []
    for root in ("spec", "status"):
        if root not in schema["properties"]:
            continue  # AppliedDynamicQuota: status only
        for field in schema_fields(schema["properties"][root], root):
            parts = field.split(".")
            if len(parts) == 2 and field not in policy_rows:
                missing.append(field)
            profile = parts[:3] == ["spec", "resources", "*"] and len(parts) == 4
            if profile and parts[3] not in profile_rows:
                missing.append(field)
    assert missing == [], f"CRD fields not in the policy reference: {missing}"
    documented = {k for k in policy_rows if k.startswith(("spec.", "status."))}
    fields = {
        field
        for root in ("spec", "status")
        if root in schema["properties"]
        for field in schema_fields(schema["properties"][root], root)
    }
    assert documented - fields == set(), "the policy reference documents fields not in the CRD"


def test_every_condition_type_is_in_the_policy_reference(reference: str) -> None:
    """The condition types the CRD describes (backticked capitalised words followed by ``is``)
    each have a row ``status.conditions[type=...]``."""
    (version,) = yaml.safe_load(CRDS[0].read_text())["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    described = set(
        re.findall(r"`([A-Z][A-Za-z]+)` is", status["properties"]["conditions"]["description"])
    )
    assert described == {
        "Valid", "Shadowed", "Guarded", "QuotaControllerStalled", "Ready", "Reconciling", "Stalled",
    }  # fmt: skip
    rows = set(table_keys(section(reference, "DynamicQuotaPolicy")))
    missing = sorted(t for t in described if f"status.conditions[type={t}]" not in rows)
    assert missing == []


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


MARKDOWN = sorted(
    [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.md")]
)


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link of the page names an existing file (or folder), and its ``#anchor``
    a heading of that page: no link to a document outside the repository."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists() or not dest.is_relative_to(ROOT):
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.MULTILINE)
            if anchor not in {slug(h) for h in headings}:
                broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_architecture_lists_every_layer_of_every_contract() -> None:
    """docs/architecture.md's contract table names every module of each layers contract of
    pyproject.toml but the package picture (it drifted once: seven budget modules missing)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.M)}
    missing: list[str] = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        if (
            contract["type"] != "layers"
            or contract["name"] in ("layers",)
            or contract["name"] not in rows
        ):
            continue
        row = rows[contract["name"]]
        for layer in contract["layers"]:
            missing += [
                f"{contract['name']}: {m}"
                for m in (p.strip() for p in layer.split("|"))
                if f"`{m}`" not in row
                and f" {m} " not in row
                and f"`{m} " not in row
                and f" {m}`" not in row
            ]
    assert missing == []
