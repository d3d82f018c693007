"""`make dist`'s outputs installed as users install them (issue 30; `make dist-test`).

- the wheel and sdist: the version, the entry points, nothing of the test bed;
- the CLI from the wheel with `uv tool install` and with `pipx install` (each in its own
  temporary home, dependencies pinned by constraints.txt): `dynquota --version`, the kubectl
  plugin;
- the chart package: its Chart.yaml (version, appVersion, home, sources, icon, Artifact Hub
  annotations naming every CRD of crds/ and the default image), its README, its CRDs, installed
  with `helm install` from the .tgz on the local control plane; the installed CLI (uv's) then
  reads the release (`dynquota plan` decides with its settings) and the kill switch;
- the image archive, when `make dist` built one: an OCI archive of the chart's default image.

Skipped, saying why, when dist/ has not been built (run `make dist` or `make dist-test`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dynquota import __version__
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
WHEEL = DIST / f"dynquota-{__version__}-py3-none-any.whl"
SDIST = DIST / f"dynquota-{__version__}.tar.gz"
CHART = DIST / f"dynquota-{__version__}.tgz"
IMAGE = DIST / f"dynquota-image-{__version__}.oci.tar"
SCRIPTS = {"dynquota", "kubectl-dynquota", "kubectl_complete-dynquota"}

pytestmark = pytest.mark.skipif(
    not WHEEL.exists(), reason=f"{WHEEL.name} not built: run `make dist` (or `make dist-test`)"
)


def run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``args`` from ``/`` (not this checkout: ``python -c`` would import its package)."""
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout,
        check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done.stdout


def test_the_artifacts_carry_the_one_version_and_their_checksums() -> None:
    names = {p.name for p in DIST.iterdir()}
    assert {WHEEL.name, SDIST.name, CHART.name, "SHA256SUMS", "IMAGE"} <= names
    sums = dict(
        reversed(line.split(maxsplit=1)) for line in (DIST / "SHA256SUMS").read_text().splitlines()
    )
    for name, digest in sums.items():
        assert hashlib.sha256((DIST / name).read_bytes()).hexdigest() == digest, name
    assert set(sums) == names - {"SHA256SUMS"}


def test_the_wheel_has_the_package_and_the_cli_and_no_test_bed_dependency() -> None:
    with zipfile.ZipFile(WHEEL) as wheel:
        files = wheel.namelist()
        meta = wheel.read(f"dynquota-{__version__}.dist-info/METADATA").decode()
        entry = wheel.read(f"dynquota-{__version__}.dist-info/entry_points.txt").decode()
    assert f"Version: {__version__}" in meta.splitlines()
    assert "Requires-Python: >=3.11" in meta.splitlines()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert f"dynquota-{__version__}.dist-info/licenses/LICENSE" in files
    assert set(re.findall(r"^(\S+) = ", entry, re.MULTILINE)) == SCRIPTS
    assert not [f for f in files if f.startswith("tests/")]
    # the test bed's sync client is an extra, never a requirement of the CLI
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: ")]
    assert [r for r in requires if "kubernetes>" in r] == [
        'Requires-Dist: kubernetes>=30; extra == "testing"'
    ]
    with tarfile.open(SDIST) as sdist:
        members = set(sdist.getnames())
    top = f"dynquota-{__version__}"
    assert {f"{top}/pyproject.toml", f"{top}/README.md", f"{top}/LICENSE", f"{top}/PKG-INFO",
            f"{top}/dynquota/__init__.py"} <= members  # fmt: skip
    assert not [m for m in members if m.startswith(f"{top}/tests/")]


def tool_env(tmp: Path) -> dict[str, str]:
    """A private home for uv's and pipx's tools and their commands."""
    env = dict(os.environ)
    env.update({
        "UV_TOOL_DIR": str(tmp / "uv-tools"), "UV_TOOL_BIN_DIR": str(tmp / "bin-uv"),
        "PIPX_HOME": str(tmp / "pipx"), "PIPX_BIN_DIR": str(tmp / "bin-pipx"),
        "PIPX_MAN_DIR": str(tmp / "man"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })  # fmt: skip
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture(scope="module")
def uv_cli(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The CLI installed from the wheel with ``uv tool install`` (docs/install.md)."""
    tmp = tmp_path_factory.mktemp("uv")
    env = tool_env(tmp)
    python = ROOT / ".venv" / "bin" / "python"
    run(ROOT / ".venv" / "bin" / "uv", "tool", "install", "--python", python,
        "--constraints", ROOT / "constraints.txt", WHEEL, env=env)  # fmt: skip
    return tmp / "bin-uv", env


def test_uv_tool_install_gives_the_cli_and_the_kubectl_plugin(
    uv_cli: tuple[Path, dict[str, str]],
) -> None:
    bin_dir, env = uv_cli
    assert {p.name for p in bin_dir.iterdir()} == SCRIPTS
    assert run(bin_dir / "dynquota", "--version", env=env).strip() == f"dynquota {__version__}"
    plugin = run(bin_dir / "kubectl-dynquota", "--help", env=env)
    for command in ("plan", "status", "override", "kill-switch", "cleanup"):
        assert command in plugin
    # the package comes from the tool's own environment, not from this checkout
    python = Path(os.readlink(bin_dir / "dynquota")).parent / "python"
    where = run(python, "-c", "import dynquota; print(dynquota.__file__)", env=env)
    assert not where.startswith(str(ROOT)), where


def test_pipx_install_gives_the_cli(tmp_path: Path) -> None:
    env = tool_env(tmp_path)
    run(ROOT / ".venv" / "bin" / "python", "-m", "pipx", "install",
        "--python", ROOT / ".venv" / "bin" / "python",
        "--pip-args", f"--constraint {ROOT / 'constraints.txt'}", WHEEL, env=env)  # fmt: skip
    bin_dir = tmp_path / "bin-pipx"
    assert {p.name for p in bin_dir.iterdir()} == SCRIPTS
    assert run(bin_dir / "dynquota", "--version", env=env).strip() == f"dynquota {__version__}"


def helm(cp: LocalControlPlane, *args: str | Path) -> str:
    assert cp.bin_dir is not None
    return run(cp.bin_dir / "helm", "--kubeconfig", cp.kubeconfig, *args)


def test_the_chart_package_metadata_readme_and_crds(controlplane: LocalControlPlane) -> None:
    chart = yaml.safe_load(helm(controlplane, "show", "chart", CHART))
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)
    assert chart["home"] == "https://github.com/dynquota/dynquota"
    assert chart["sources"] == ["https://github.com/dynquota/dynquota"]
    assert chart["icon"] == (
        f"https://raw.githubusercontent.com/dynquota/dynquota/v{__version__}/docs/images/"
        "dynquota.svg"
    )
    assert (ROOT / "docs" / "images" / "dynquota.svg").read_text().startswith("<svg ")
    notes = chart["annotations"]
    crds = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    assert [c["name"] for c in yaml.safe_load(notes["artifacthub.io/crds"])] == [
        c["metadata"]["name"] for c in crds
    ]
    assert [e["kind"] for e in yaml.safe_load(notes["artifacthub.io/crdsExamples"])] == [
        c["spec"]["names"]["kind"] for c in crds
    ]
    assert yaml.safe_load(notes["artifacthub.io/images"]) == [
        {"name": "dynquota", "image": f"ghcr.io/dynquota/dynquota:{__version__}"}
    ]
    assert notes["artifacthub.io/license"] == "Apache-2.0"
    readme = helm(controlplane, "show", "readme", CHART)
    assert readme.rstrip() == (ROOT / "helm" / "dynquota" / "README.md").read_text().rstrip()
    assert f"--version {__version__}" in readme
    shown = [d for d in yaml.safe_load_all(helm(controlplane, "show", "crds", CHART)) if d]
    assert sorted(d["metadata"]["name"] for d in shown) == sorted(
        c["metadata"]["name"] for c in crds
    )


@pytest.fixture(scope="module")
def installed(controlplane: LocalControlPlane) -> Iterator[tuple[str, str]]:
    """The packaged chart installed from the .tgz (its policy narrowed to a test label);
    yields (release, namespace)."""
    tag = uuid.uuid4().hex[:6]
    release, namespace = f"dist{tag}", f"dq-dist-{tag}"
    helm(controlplane, "install", release, CHART, "--namespace", namespace, "--create-namespace",
         "--set-string", f"defaultPolicy.namespaceSelector.matchLabels.dqdist={tag}",
         "--set", "governanceLabels.guardedKeys={dqdist}")  # fmt: skip
    try:
        yield release, namespace
    finally:
        helm(controlplane, "uninstall", release, "-n", namespace, "--no-hooks", "--wait")
        controlplane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_the_packaged_chart_installs_and_the_installed_cli_reads_it(
    controlplane: LocalControlPlane,
    installed: tuple[str, str],
    uv_cli: tuple[Path, dict[str, str]],
) -> None:
    release, namespace = installed
    listed = json.loads(helm(controlplane, "list", "-n", namespace, "-o", "json"))
    assert [(r["name"], r["chart"], r["app_version"]) for r in listed] == [
        (release, f"dynquota-{__version__}", __version__)
    ]
    deployment = json.loads(controlplane.kubectl(
        "-n", namespace, "get", "deployment", f"{release}-dynquota", "-o", "json"
    ))  # fmt: skip
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/dynquota/dynquota:{__version__}"
    bin_dir, env = uv_cli
    env = {**env, "KUBECONFIG": controlplane.kubeconfig}
    tenant = f"{namespace}-team"
    controlplane.kubectl("create", "namespace", tenant)
    controlplane.kubectl("label", "namespace", tenant, f"dqdist={namespace.rsplit('-', 1)[1]}")
    wait_until(  # the root CA publisher's ConfigMap: the usage the plan below counts
        lambda: "kube-root-ca.crt" in controlplane.kubectl("-n", tenant, "get", "configmaps"),
        f"kube-root-ca.crt in {tenant}",
    )
    try:
        plan = json.loads(run(bin_dir / "dynquota", "plan", "--release", release,
                              "--release-namespace", namespace, "-n", tenant, "-o", "json",
                              env=env))  # fmt: skip
    finally:
        controlplane.kubectl("delete", "namespace", tenant, "--wait=false")
    assert plan["apiVersion"] == "plan.dynquota.io/v2"
    settings = plan["settings"]
    assert (settings["from"], settings["release"], settings["deployment"]) == (
        "release", release, f"{namespace}/{release}-dynquota",
    )  # fmt: skip
    assert (settings["namespace"], settings["overrideTTLSeconds"]) == (namespace, 604800)
    # the chart's default policy is in dry run on a first install: audit only
    assert [(r["namespace"], r["resource"], r["target"], r["why"]) for r in plan["rows"]] == [
        (tenant, "pods", 10,
         "dry run, not written: create pods 10: usage 0, buffer 40%, at minimum 10"),
        (tenant, "configmaps", 50,
         "dry run, not written: create configmaps 50: usage 1, buffer 40%, at minimum 50"),
    ]  # fmt: skip
    status = run(bin_dir / "dynquota", "kill-switch", "status", env=env)
    assert status.startswith("kill switch: released (no dynquota.io/kill-switch on kube-system)")
    # the chart's Artifact Hub examples are valid objects of the installed CRDs
    chart = yaml.safe_load(helm(controlplane, "show", "chart", CHART))
    for example in yaml.safe_load(chart["annotations"]["artifacthub.io/crdsExamples"]):
        body = dict(example)
        if "namespace" in body["metadata"]:
            body["metadata"] = {**body["metadata"], "namespace": namespace}
        out = controlplane.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                                   input=json.dumps(body))  # fmt: skip
        assert out.strip().endswith(f"/{body['metadata']['name']}"), out


def test_the_image_archive_is_the_charts_default_image() -> None:
    note = (DIST / "IMAGE").read_text()
    if not IMAGE.exists():
        pytest.skip(f"no image in dist/: {note.strip()}")
    assert note.startswith(f"ghcr.io/dynquota/dynquota:{__version__} built on ")
    with tarfile.open(IMAGE) as archive:
        index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
    names = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
             for m in index["manifests"]]  # fmt: skip
    assert any(n in (__version__, f"ghcr.io/dynquota/dynquota:{__version__}") for n in names), names
