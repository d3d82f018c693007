"""The container image without Docker: the Dockerfile's build steps (wheel, then a clean virtualenv
with the pinned dependencies) repeated here, and the operator from that virtualenv running a
short reconcile against the local control plane with the chart's RBAC, through a TokenRequest
token of the chart's ServiceAccount (not as cluster admin)."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
PAUSE = "registry.k8s.io/pause:3.10"


def test_dockerfile_shape() -> None:
    """Multi-stage, wheel built in the first stage, numeric non-root USER, exec-form
    ENTRYPOINT `dynquota run`, and the same install commands this module runs."""
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", text, re.MULTILINE)
    assert stages == [("${PYTHON_IMAGE}", "build"), ("${PYTHON_IMAGE}", "")]
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+-slim-\w+$", text, re.MULTILINE)
    assert "python -m pip wheel --no-deps --wheel-dir /wheels ." in text
    assert "-m pip install --constraint constraints.txt /wheels/dynquota-*.whl" in text
    assert "COPY --from=build /opt/dynquota /opt/dynquota" in text
    assert re.findall(r"^USER (.+)$", text, re.MULTILINE) == ["65532:65532"]
    assert re.findall(r"^ENTRYPOINT (.+)$", text, re.MULTILINE) == ['["dynquota", "run"]']
    assert "CMD" not in re.findall(r"^(\w+)", text, re.MULTILINE)
    # The chart runs it as the same numeric user.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["securityContext"]["runAsUser"] == 65532
    assert values["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.fixture(scope="session")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Dockerfile's build stage, without Docker: `pip wheel --no-deps .`, then a fresh
    virtualenv (no system site-packages) with the wheel and its dependencies pinned by
    constraints.txt. Returns the virtualenv's bin directory."""
    pytest.importorskip("dynquota.cli", reason="the CLI (dynquota.cli) is not written yet")
    work = tmp_path_factory.mktemp("image")
    # the Dockerfile's COPY list, so a build/ left in the checkout cannot leak into the wheel
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "constraints.txt", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "dynquota", source / "dynquota", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
         "--wheel-dir", str(work / "wheels"), str(source)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = (work / "wheels").glob("dynquota-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    bin_dir = work / "venv" / "bin"
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--constraint", str(ROOT / "constraints.txt"), str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return bin_dir


def test_installed_wheel_has_the_cli_and_no_source_tree(image_venv: Path) -> None:
    done = subprocess.run(
        [str(image_venv / "dynquota"), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for command in ("run", "plan", "override", "kill-switch"):
        assert command in done.stdout
    # The package comes from the virtualenv, not from this checkout.
    where = subprocess.run(
        [str(image_venv / "python"), "-c", "import dynquota; print(dynquota.__file__)"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(image_venv.parent)), where
    # Test-only dependencies are not in the image.
    missing = subprocess.run(
        [str(image_venv / "python"), "-c", "import pytest"], capture_output=True, check=False
    )
    assert missing.returncode == 1
    # Only the product ships: no test bed, no demo (issue 25); `dynquota demo` says so.
    (wheel,) = (image_venv.parent.parent / "wheels").glob("dynquota-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packages = {n.rsplit("/", 1)[0] for n in archive.namelist() if n.endswith(".py")}
    assert "dynquota/operator" in packages
    assert not {p for p in packages if p.startswith(("dynquota/testing", "dynquota/demo"))}
    demo = subprocess.run(
        [str(image_venv / "dynquota"), "demo"], capture_output=True, text=True, check=False
    )
    assert demo.returncode == 2
    assert "source checkout (dynquota.demo is not installed)" in demo.stderr


@pytest.fixture
def chart_rbac(controlplane: LocalControlPlane) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount and ClusterRole (rendered by `helm template`) in a fresh
    release namespace; yields (namespace, ServiceAccount name)."""
    assert controlplane.bin_dir is not None
    tag = uuid.uuid4().hex[:6]
    release, ns = f"img{tag}", f"dq-img-{tag}"
    controlplane.kubectl("create", "namespace", ns)
    rendered = subprocess.run(
        [str(controlplane.bin_dir / "helm"), "template", release, str(CHART), "-n", ns,
         "-s", "templates/serviceaccount.yaml", "-s", "templates/clusterrole.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    controlplane.kubectl("apply", "-f", "-", input=rendered)
    controlplane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    controlplane.kubectl(
        "wait", "--for=condition=Established", "crd/dynamicquotapolicies.dynquota.io"
    )
    yield ns, f"{release}-dynquota"
    controlplane.kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered)
    controlplane.kubectl("delete", "namespace", ns, "--wait=false")


def helm_test_script(controlplane: LocalControlPlane, url: str) -> str:
    """The Python check of the chart's `helm test` Pod, pointed at ``url``."""
    assert controlplane.bin_dir is not None
    rendered = subprocess.run(
        [str(controlplane.bin_dir / "helm"), "template", "dq", str(CHART), "-n", "ns",
         "-s", "templates/tests/test-metrics.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (container,) = yaml.safe_load(rendered)["spec"]["containers"]
    assert container["command"][:2] == ["python", "-c"]
    script: str = container["command"][2]
    in_cluster = "http://dq-dynquota-metrics.ns.svc:8080/metrics"
    assert in_cluster in script
    return script.replace(in_cluster, url)


def test_operator_from_the_clean_venv_reconciles_with_the_chart_rbac(
    image_venv: Path,
    controlplane: LocalControlPlane,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    chart_rbac: tuple[str, str],
    tmp_path: Path,
) -> None:
    own_ns, sa = chart_rbac
    core = kubernetes.client.CoreV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    tag = uuid.uuid4().hex[:6]
    core.patch_namespace(namespace, {"metadata": {"labels": {"dq-image-test": tag}}})
    for i in range(3):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"p{i}"},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]},
            },
        )
    policy = f"image-test-{tag}"
    custom.create_cluster_custom_object(
        "dynquota.io", "v1alpha1", "dynamicquotapolicies",
        {"apiVersion": "dynquota.io/v1alpha1", "kind": "DynamicQuotaPolicy",
         "metadata": {"name": policy},
         "spec": {"priority": 1_000_000,
                  "namespaceSelector": {"matchLabels": {"dq-image-test": tag}}}},
    )  # fmt: skip
    token = controlplane.kubectl("create", "token", sa, "-n", own_ns, "--duration=1h").strip()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "cp",
                        "cluster": {
                            "server": controlplane.server,
                            "certificate-authority": str(controlplane.ca_file),
                        },
                    }
                ],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "cp", "user": sa}}],
                "current-context": "sa",
            }
        )
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    env = {
        "PATH": f"{image_venv}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(kubeconfig),
        "DYNQUOTA_NAMESPACE": own_ns,
        "DYNQUOTA_POD_NAME": "image-test",
        "DYNQUOTA_METRICS_PORT": str(metrics_port),
        "DYNQUOTA_PROBE_PORT": "0",
        "DYNQUOTA_LOG_FORMAT": "json",
    }
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        # The image's ENTRYPOINT, from outside the checkout.
        proc = subprocess.Popen(
            [str(image_venv / "dynquota"), "run"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
        )  # fmt: skip
    try:

        def created() -> object:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return core.read_namespaced_resource_quota("dynquota", namespace)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise

        quota = wait_until(created, f"managed quota in {namespace}", timeout=90)
        # pods: U=3 -> ceil(3 * 1.4) = 5, raised to the minimum 10; configmaps: U=1
        # (kube-root-ca.crt) -> 2, raised to the minimum 50.
        assert quota.spec.hard == {"pods": "10", "configmaps": "50"}
        assert quota.metadata.labels["app.kubernetes.io/managed-by"] == "dynquota"
        # The main resource is written by dynquota alone (kube-controller-manager owns /status).
        writers = [m.manager for m in quota.metadata.managed_fields if not m.subresource]
        assert writers == ["dynquota"]
        # The `helm test` Pod's check passes against this operator's /metrics.
        script = helm_test_script(controlplane, f"http://127.0.0.1:{metrics_port}/metrics")
        checked = subprocess.run(
            [str(image_venv / "python"), "-c", script], capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.endswith("-> ['dynquota_kill_switch_engaged 0.0']\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            custom.delete_cluster_custom_object(
                "dynquota.io", "v1alpha1", "dynamicquotapolicies", policy
            )
    assert proc.returncode in (0, -signal.SIGTERM), log.read_text()[-3000:]
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    # The operator wrote nothing on the pods or the namespace.
    pods = core.list_namespaced_pod(namespace).items
    assert len(pods) == 3
    managers = {m.manager for p in pods for m in p.metadata.managed_fields}
    managers |= {m.manager for m in core.read_namespace(namespace).metadata.managed_fields}
    assert "dynquota" not in managers, managers
