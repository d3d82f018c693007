"""Docs that tell the truth, and one version (issue 30): each check reads the tree under a root,
passes on this repository, and fails on a copy with a contradiction planted in it.

- the version lives in ``dynquota/__init__.py``: pyproject reads it, the chart's ``version``
  and ``appVersion`` carry it, CHANGELOG's top section is that release, and every image tag,
  chart archive, ``--version`` and ``dynquota==`` in the docs names it;
- no page describes a later version than the release (``v0.3`` while releasing 0.2.0), and
  the release is not called unreleased;
- every object kind the chart renders, and every CRD, is named in docs/chart.md's objects
  table; every CRD is in Chart.yaml's Artifact Hub annotation;
- what docs/chart.md says the chart leaves out is not shipped (a dashboard), and no page says
  Secrets are not tracked while a ``secrets`` key is sized;
- no page says the ``enforcement`` label of the per-namespace series is not wired (every series
  ``unknown``) while the reporter sets it.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from dynquota import __version__
from dynquota.policy.models import validate_policy

ROOT = Path(__file__).resolve().parents[2]
_SEMVER = r"\d+\.\d+\.\d+"


def pages(root: Path) -> list[Path]:
    """The user-facing pages: README, SECURITY, docs/, examples/, the chart's README."""
    found = [root / "README.md", root / "SECURITY.md", root / "helm" / "dynquota" / "README.md"]
    found += sorted((root / "docs").glob("*.md")) + sorted((root / "examples").glob("*.md"))
    return [p for p in found if p.exists()]


def version_of(root: Path) -> str:
    match = re.search(
        r'^__version__ = "([^"]+)"$', (root / "dynquota/__init__.py").read_text(), re.M
    )
    assert match, "dynquota/__init__.py has no __version__"
    return match.group(1)


def version_problems(root: Path) -> list[str]:
    """Every copy of the version that is not the one in ``dynquota/__init__.py``."""
    version = version_of(root)
    problems = []
    project = tomllib.loads((root / "pyproject.toml").read_text())
    if "version" in project["project"] or project["project"].get("dynamic") != ["version"]:
        problems.append("pyproject.toml: the version must be dynamic")
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    if attr != "dynquota.__version__":
        problems.append(f"pyproject.toml: version from {attr}")
    chart = yaml.safe_load((root / "helm/dynquota/Chart.yaml").read_text())
    for key in ("version", "appVersion"):
        if str(chart[key]) != version:
            problems.append(f"Chart.yaml {key}: {chart[key]} (not {version})")
    image = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])[0]["image"]
    if not image.endswith(f":{version}"):
        problems.append(f"Chart.yaml artifacthub.io/images: {image}")
    heading = re.search(r"^## (\S+)(.*)$", (root / "CHANGELOG.md").read_text(), re.M)
    assert heading, "CHANGELOG.md has no section"
    if heading.group(1) != version or not re.fullmatch(r" — \d{4}-\d\d-\d\d", heading.group(2)):
        problems.append(f"CHANGELOG.md: top section '## {heading.group(1)}{heading.group(2)}'")
    for page in pages(root):
        text = page.read_text()
        for pattern in (rf"dynquota:({_SEMVER})\b", rf"dynquota-(?:image-)?({_SEMVER})[.-]",
                        rf"--version ({_SEMVER})\b", rf"dynquota==({_SEMVER})\b"):  # fmt: skip
            for found in re.findall(pattern, text):
                if found != version:
                    problems.append(f"{page.relative_to(root)}: {pattern} names {found}")
    return problems


def future_problems(root: Path) -> list[str]:
    """Pages that describe a later dynquota version than the release, or call it unreleased.

    dynquota's versions are written ``vX.Y`` without a patch level (``v0.37.2`` or ``v0.8.0``
    are other projects' versions, and are left alone)."""
    major, minor = (int(p) for p in version_of(root).split(".")[:2])
    problems = []
    for page in pages(root):
        text = page.read_text()
        for found_major, found_minor in re.findall(r"\bv(\d+)\.(\d+)\b(?!\.\d)", text):
            if (int(found_major), int(found_minor)) > (major, minor) and int(found_minor) < 10:
                problems.append(f"{page.relative_to(root)}: v{found_major}.{found_minor}")
        if re.search(rf"{re.escape(version_of(root))} \(unreleased\)", text):
            problems.append(f"{page.relative_to(root)}: {version_of(root)} called unreleased")
    return problems


def rendered_kinds(root: Path) -> set[str]:
    """Every ``kind:`` the chart's templates (hooks and tests included) render."""
    kinds = set()
    for template in (root / "helm/dynquota/templates").rglob("*.yaml"):
        kinds |= set(re.findall(r"^kind: (\w+)\s*$", template.read_text(), re.M))
    return kinds


def objects_table(root: Path) -> list[tuple[str, str]]:
    """(Object cell, Name cell) of each row of docs/chart.md's objects table."""
    text = (root / "docs/chart.md").read_text()
    section = text.split("## Objects", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+?) \| .* \|$", section, re.M)
    return [(o, n) for o, n in rows if o not in ("Object", "---")]


def named(kind: str, cell: str) -> bool:
    """Whether the table's Object ``cell`` names ``kind`` (``X + Binding`` and ``X(+Binding)``
    name ``XBinding``)."""
    if re.search(rf"\b{kind}\b", cell):
        return True
    base = kind.removesuffix("Binding")
    return base != kind and bool(re.search(rf"\b{base}\b\s*(\+ ?|\(\+)\s*(\w*)Binding", cell))


def chart_doc_problems(root: Path) -> list[str]:
    """Kinds and CRDs the chart ships that docs/chart.md's objects table does not name, CRDs
    missing from the Artifact Hub annotation, and things the 'left out' table says are left
    out while the chart ships them."""
    table = objects_table(root)
    problems = [f"docs/chart.md names no {kind}" for kind in sorted(rendered_kinds(root))
                if not any(named(kind, cell) for cell, _ in table)]  # fmt: skip
    crds = {
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (root / "crds").glob("*.yaml")
    }
    names = {n for _, cell in table for n in re.findall(r"`([^`]+)`", cell)}
    problems += [f"docs/chart.md's objects table names no CRD {c}" for c in sorted(crds - names)]
    chart = yaml.safe_load((root / "helm/dynquota/Chart.yaml").read_text())
    annotated = {c["name"] for c in yaml.safe_load(chart["annotations"]["artifacthub.io/crds"])}
    problems += [f"Chart.yaml artifacthub.io/crds lacks {c}" for c in sorted(crds - annotated)]
    text = (root / "docs/chart.md").read_text()
    left_out = text.split("## Deliberately left out", 1)[1]
    cells = re.findall(r"^\| ([^|]+) \|", left_out, re.M)
    if any(re.search("dashboard", c, re.I) for c in cells) and any(
        (root / "helm/dynquota/dashboards").glob("*.json")
    ):
        problems.append("docs/chart.md leaves out a Grafana dashboard the chart ships")
    return problems


def secrets_problems(root: Path) -> list[str]:
    """Pages saying Secrets are not tracked, while a policy may size a ``secrets`` key."""
    sized = validate_policy(
        {"metadata": {"name": "p"}, "spec": {"resources": {"secrets": {"maximum": 10}}}}
    ).valid
    if not sized:
        return []
    return [
        f"{page.relative_to(root)}: says Secrets are not tracked"
        for page in pages(root)
        if re.search(r"Secrets are not (tracked|sized|counted)", page.read_text())
    ]


_UNWIRED = re.compile(
    r"until (that|the) call is wired|enforcement\W+label is not (yet )?wired|"
    r"every (per-namespace )?series says `?unknown`?",
    re.I,
)


def enforcement_problems(root: Path) -> list[str]:
    """Pages saying the ``enforcement`` label is not wired, while each decision sets it."""
    import inspect

    from dynquota.operator import reporting

    if "set_enforcement(" not in inspect.getsource(reporting.Reporter.report_decision):
        return []
    return [
        f"{page.relative_to(root)}: says the enforcement label is not wired"
        for page in pages(root)
        if _UNWIRED.search(" ".join(page.read_text().split()))
    ]


CHECKS = (
    version_problems, future_problems, chart_doc_problems, secrets_problems, enforcement_problems,
)  # fmt: skip


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_this_repository_has_no_contradiction(check: object) -> None:
    assert callable(check)
    assert check(ROOT) == []


def test_the_version_is_the_packages() -> None:
    assert version_of(ROOT) == __version__


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The parts of this tree the checks read, copied."""
    for part in ("docs", "examples", "helm", "crds"):
        shutil.copytree(ROOT / part, tmp_path / part)
    for name in ("README.md", "SECURITY.md", "CHANGELOG.md", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "dynquota").mkdir()
    shutil.copy(ROOT / "dynquota/__init__.py", tmp_path / "dynquota/__init__.py")
    for check in CHECKS:
        assert check(tmp_path) == [], check.__name__
    return tmp_path


def plant(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_a_stale_image_tag_or_chart_version_is_found(copy: Path) -> None:
    plant(copy / "docs/install.md", "registry.example.com/platform/dynquota:" + __version__,
          "registry.example.com/platform/dynquota:0.1.0")  # fmt: skip
    plant(copy / "helm/dynquota/Chart.yaml", f'appVersion: "{__version__}"', 'appVersion: "0.1.9"')
    problems = version_problems(copy)
    assert problems[0] == f"Chart.yaml appVersion: 0.1.9 (not {__version__})"
    assert problems[1:] == [rf"docs/install.md: dynquota:({_SEMVER})\b names 0.1.0"]


def test_an_unreleased_changelog_is_found(copy: Path) -> None:
    plant(copy / "CHANGELOG.md", f"## {__version__} — ", "## Unreleased — ")
    (problem,) = version_problems(copy)
    assert problem.startswith("CHANGELOG.md: top section '## Unreleased — ")


def test_a_page_describing_a_later_version_is_found(copy: Path) -> None:
    major, minor = __version__.split(".")[:2]
    later = f"v{major}.{int(minor) + 1}"
    plant(copy / "docs/operator.md", "## Health checks", f"## Health checks ({later})")
    plant(
        copy / "docs/upgrade.md",
        f"### {__version__}: the default",
        f"### {__version__} (unreleased): the default",
    )
    assert future_problems(copy) == [
        f"docs/operator.md: {later}",
        f"docs/upgrade.md: {__version__} called unreleased",
    ]


def test_a_chart_object_missing_from_the_docs_is_found(copy: Path) -> None:
    chart_md = copy / "docs/chart.md"
    lines = chart_md.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("| ConfigMap (off")
            and "`quotabudgets.dynquota.io`" not in line]  # fmt: skip
    assert len(kept) == len(lines) - 2
    chart_md.write_text("".join(kept))
    assert chart_doc_problems(copy) == [
        "docs/chart.md names no ConfigMap",
        "docs/chart.md's objects table names no CRD quotabudgets.dynquota.io",
    ]


def test_a_crd_missing_from_the_artifact_hub_annotation_is_found(copy: Path) -> None:
    chart = copy / "helm/dynquota/Chart.yaml"
    text = chart.read_text()
    start = text.index("    - kind: QuotaBudget\n")
    end = text.index("  artifacthub.io/crdsExamples")
    chart.write_text(text[:start] + text[end:])
    assert chart_doc_problems(copy) == [
        "Chart.yaml artifacthub.io/crds lacks quotabudgets.dynquota.io"
    ]


def test_a_shipped_dashboard_said_to_be_left_out_is_found(copy: Path) -> None:
    plant(copy / "docs/chart.md", "| An admission webhook |",
          "| A Grafana dashboard | Not shipped. |\n| An admission webhook |")  # fmt: skip
    assert chart_doc_problems(copy) == [
        "docs/chart.md leaves out a Grafana dashboard the chart ships"
    ]


def test_secrets_said_untracked_is_found(copy: Path) -> None:
    plant(
        copy / "docs/chart.md",
        "## Deliberately left out",
        "Secrets are not tracked.\n\n## Deliberately left out",
    )
    assert secrets_problems(copy) == ["docs/chart.md: says Secrets are not tracked"]


def test_an_enforcement_label_said_unwired_is_found(copy: Path) -> None:
    plant(
        copy / "docs/metrics.md",
        "(`Reporter.report_decision` calls",
        "(until that call is wired in, every series says `unknown`; `Reporter.report_decision` "
        "calls",
    )
    assert enforcement_problems(copy) == [
        "docs/metrics.md: says the enforcement label is not wired"
    ]
