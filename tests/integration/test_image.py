"""The container image users run: the unchanged Dockerfile built by buildah
(``hack/image/build.sh``, ``make image``; on CI a Debian-made stand-in base, see
docs/install.md), then run for real against the local control plane with the chart's RBAC.

Running: ``podman run --read-only --user 65532`` where podman can start containers; where it
cannot (these CI machines: crun fails on ``setrlimit RLIMIT_NPROC``), the image's own
filesystem runs its entrypoint: ``buildah from`` + ``buildah mount``, then ``chroot
--userspec=65532:65532`` with the image's environment. Either way the operator gets the
chart's ServiceAccount token as a kubeconfig under ``/tmp`` (an emptyDir in the chart; the only
place the container may write), and this checks: it reconciles a namespace, serves ``/metrics``
(every metric the alerts use is there) and ``/healthz``, runs as uid 65532, needs no shell,
writes nothing outside ``/tmp``, stops cleanly on SIGTERM, and ``dynquota demo`` says clearly
that it does not belong in the image. Image size and start-up time are printed (``-s``).

Skipped, saying why, only where buildah is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.promql import missing_metrics, scrape_families, selected_metrics
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
PAUSE = "registry.k8s.io/pause:3.10"
STORAGE = ["--storage-driver", os.environ.get("DYNQUOTA_STORAGE_DRIVER", "vfs")]
UID = 65532

pytestmark = [
    pytest.mark.skipif(
        shutil.which("buildah") is None,
        reason="buildah is not installed (apt-get install buildah podman mmdebstrap; .ci/run "
        "does): the image cannot be built here",
    ),
    # The first test builds the image when the tree changed since `make image` (minutes with
    # vfs storage on 2 cores; .ci/run builds it before `make test`, so there it is reused).
    pytest.mark.timeout(1800),
]


def run(*cmd: str, timeout: float = 120) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from the current tree (``hack/image/build.sh`` reuses one built from the
    same inputs at once; otherwise it builds: minutes)."""
    done = subprocess.run(
        [str(ROOT / "hack" / "image" / "build.sh")],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    name = done.stdout.strip().splitlines()[-1]
    print(f"\nimage: {name} ({done.stderr.strip().splitlines()[-1]})")
    return name


@pytest.fixture(scope="module")
def config(image: str) -> dict[str, Any]:
    """The image's OCI config (``User``, ``Entrypoint``, ``Env``, ...)."""
    inspected = json.loads(run("buildah", *STORAGE, "inspect", "--type", "image", image))
    oci: dict[str, Any] = inspected["OCIv1"]["config"]
    return oci


@pytest.fixture(scope="module")
def rootfs(image: str) -> Iterator[Path]:
    """The image's filesystem, mounted read-write by buildah (a working container)."""
    ctr = run(
        "buildah",
        *STORAGE,
        "from",
        "--pull-never",
        "--name",
        f"dq-test-{uuid.uuid4().hex[:6]}",
        image,
    ).strip()
    try:
        yield Path(run("buildah", *STORAGE, "mount", ctr).strip())
    finally:
        subprocess.run(["buildah", *STORAGE, "umount", ctr], capture_output=True, check=False)
        subprocess.run(["buildah", *STORAGE, "rm", ctr], capture_output=True, check=False)


def test_image_config(image: str, config: dict[str, Any], rootfs: Path) -> None:
    """Non-root numeric user, exec-form entrypoint, no shell in the way, nothing of the build
    stage left behind; prints the size."""
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["dynquota", "run"]
    assert not config.get("Cmd")
    assert set(config["ExposedPorts"]) == {"8080/tcp", "8081/tcp"}
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["HOME"] == "/tmp"
    # kopf calls getpass.getuser(): without $USER it needs a passwd entry for the uid.
    assert env["USER"] == "dynquota"
    assert env["PATH"].split(":")[0] == "/opt/dynquota/bin"
    # The entrypoint script starts the virtualenv's Python directly (no /bin/sh wrapper).
    script = rootfs / "opt" / "dynquota" / "bin" / "dynquota"
    assert script.read_text().splitlines()[0] == "#!/opt/dynquota/bin/python"
    # Multi-stage: no sources, wheels or pip caches of the build stage in the final image.
    for leftover in ("src", "wheels", "root/.cache/pip"):
        assert not (rootfs / leftover).exists(), leftover
    # Test-only dependencies are not in the image.
    site = next((rootfs / "opt" / "dynquota" / "lib").glob("python3*/site-packages"))
    for absent in ("pytest", "cryptography", "matplotlib", "hypothesis"):
        assert not (site / absent).exists(), absent
    size = int(run("podman", *STORAGE, "image", "inspect", "--format", "{{.Size}}", image))
    print(f"\nimage size: {size / 1e6:.0f} MB ({image})")
    assert size < 1_000_000_000


# -- running it -------------------------------------------------------------------------------


@dataclass
class Runner:
    """How this machine runs the image: ``podman`` or ``chroot`` (see the module docstring)."""

    kind: str
    image: str
    rootfs: Path
    config: dict[str, Any]

    def popen(
        self, args: list[str], env: dict[str, str], files: Path, out: Any
    ) -> subprocess.Popen[bytes]:
        """Start ``args`` (the entrypoint and its arguments) with ``env`` added to the image's
        environment; ``files`` (a directory) is visible in the container as ``/tmp/dq``."""
        if self.kind == "podman":
            cmd = ["podman", *STORAGE, "run", "--rm", "--read-only", "--user", f"{UID}:{UID}",
                   "--network", "host", "--tmpfs", "/tmp", "-v", f"{files}:/tmp/dq:ro",
                   "--entrypoint", args[0]]  # fmt: skip
            cmd += [f"--env={k}={v}" for k, v in env.items()]
            return subprocess.Popen([*cmd, self.image, *args[1:]], stdout=out, stderr=out)
        inside = self.rootfs / "tmp" / "dq"
        shutil.rmtree(inside, ignore_errors=True)
        shutil.copytree(files, inside)  # a bind mount is not possible here; /tmp is scratch
        for path in [inside, *inside.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        image_env = dict(e.split("=", 1) for e in self.config["Env"])
        # chroot(8) execs the command itself (execvp with the image's PATH): no shell.
        return subprocess.Popen(
            ["/usr/sbin/chroot", f"--userspec={UID}:{UID}", str(self.rootfs), *args],
            env={**image_env, **env}, stdout=out, stderr=out, cwd="/",
        )  # fmt: skip


@pytest.fixture(scope="module")
def runner(image: str, rootfs: Path, config: dict[str, Any]) -> Runner:
    """``podman run`` if it can start this image here, else ``chroot`` (needs root)."""
    if shutil.which("podman"):
        probe = subprocess.run(
            ["podman", *STORAGE, "run", "--rm", "--read-only", "--user", f"{UID}:{UID}",
             "--entrypoint", "dynquota", image, "--version"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if probe.returncode == 0:
            return Runner("podman", image, rootfs, config)
        print(f"\npodman run cannot start containers here ({probe.stderr.strip()[-200:]}); "
              "running the image's filesystem with chroot")  # fmt: skip
    if os.geteuid() != 0:
        pytest.skip("podman run does not work here and chroot needs root")
    return Runner("chroot", image, rootfs, config)


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """``{path: (mode, size, mtime_ns)}`` of everything under ``root`` except ``/tmp``."""
    seen: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in ("tmp", "proc", "sys", "dev")]
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            seen[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return seen


@pytest.fixture
def release(controlplane: LocalControlPlane) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount and ClusterRole (``helm template``) in a fresh release
    namespace, and the CRD; yields (namespace, ServiceAccount name)."""
    assert controlplane.bin_dir is not None
    tag = uuid.uuid4().hex[:6]
    name, ns = f"oci{tag}", f"dq-oci-{tag}"
    controlplane.kubectl("create", "namespace", ns)
    rendered = run(
        str(controlplane.bin_dir / "helm"), "template", name, str(CHART), "-n", ns,
        "-s", "templates/serviceaccount.yaml", "-s", "templates/clusterrole.yaml",
    )  # fmt: skip
    controlplane.kubectl("apply", "-f", "-", input=rendered)
    controlplane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    controlplane.kubectl(
        "wait", "--for=condition=Established", "crd/dynamicquotapolicies.dynquota.io"
    )
    yield ns, f"{name}-dynquota"
    controlplane.kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered)
    controlplane.kubectl("delete", "namespace", ns, "--wait=false")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_image_runs_the_operator_against_the_control_plane(
    runner: Runner,
    controlplane: LocalControlPlane,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    release: tuple[str, str],
    tmp_path: Path,
) -> None:
    own_ns, sa = release
    core = kubernetes.client.CoreV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    tag = uuid.uuid4().hex[:6]
    core.patch_namespace(namespace, {"metadata": {"labels": {"dq-oci-test": tag}}})
    for i in range(3):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"p{i}"},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]},
            },
        )
    policy = f"oci-test-{tag}"
    custom.create_cluster_custom_object(
        "dynquota.io", "v1alpha1", "dynamicquotapolicies",
        {"apiVersion": "dynquota.io/v1alpha1", "kind": "DynamicQuotaPolicy",
         "metadata": {"name": policy},
         "spec": {"priority": 1_000_000,
                  "namespaceSelector": {"matchLabels": {"dq-oci-test": tag}}}},
    )  # fmt: skip
    files = tmp_path / "files"
    files.mkdir()
    shutil.copy(controlplane.ca_file, files / "ca.crt")
    token = controlplane.kubectl("create", "token", sa, "-n", own_ns, "--duration=1h").strip()
    (files / "kubeconfig").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "cp",
                        "cluster": {
                            "server": controlplane.server,
                            "certificate-authority": "/tmp/dq/ca.crt",
                        },
                    }
                ],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "cp", "user": sa}}],
                "current-context": "sa",
            }
        )
    )
    metrics_port, probe_port = free_port(), free_port()
    env = {
        "KUBECONFIG": "/tmp/dq/kubeconfig",
        "DYNQUOTA_NAMESPACE": own_ns,
        "DYNQUOTA_POD_NAME": "oci-test",
        "DYNQUOTA_METRICS_PORT": str(metrics_port),
        "DYNQUOTA_PROBE_PORT": str(probe_port),
        "DYNQUOTA_LOG_FORMAT": "json",
    }
    before = snapshot(runner.rootfs)
    log = tmp_path / "operator.log"
    started = time.monotonic()
    with log.open("w") as out:
        proc = runner.popen(list(runner.config["Entrypoint"]), env, files, out)
    try:

        def created() -> object:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return core.read_namespaced_resource_quota("dynquota", namespace)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise

        quota = wait_until(created, f"managed quota in {namespace}", timeout=120)
        startup = time.monotonic() - started
        print(f"\nimage ({runner.kind}): start-up to the first reconcile {startup:.1f} s")
        # pods: U=3 -> 5, raised to the minimum 10; configmaps: U=1 -> 2, raised to 50.
        assert quota.spec.hard == {"pods": "10", "configmaps": "50"}
        assert quota.metadata.labels["app.kubernetes.io/managed-by"] == "dynquota"
        if runner.kind == "chroot":
            status = Path(f"/proc/{proc.pid}/status").read_text()
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            assert uids.split()[1:] == [str(UID)] * 4, uids
        healthz = f"http://127.0.0.1:{probe_port}/healthz"
        wait_until(lambda: http_get(healthz)[0] == 200, "/healthz answers 200", timeout=30)
        code, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert code == 200
        # every per-namespace series carries `enforcement` (the image's operator says which)
        (hard,) = [line for line in text.splitlines() if line.startswith("dynquota_hard{")
                   and f'namespace="{namespace}",resource="pods"' in line]  # fmt: skip
        assert re.fullmatch(
            rf'dynquota_hard\{{enforcement="(enforced|dry-run|unknown)",namespace="{namespace}",'
            r'resource="pods"\} 10\.0',
            hard,
        ), hard
        # Every metric the chart's alerts use is on the image's /metrics too.
        rules = run(
            str(controlplane.bin_dir / "helm"), "template", "dq", str(CHART),
            "--set", "replicaCount=2", "--set", "metrics.prometheusRule.enabled=true",
            "-s", "templates/prometheusrule.yaml",
        )  # fmt: skip
        used = {
            name
            for group in yaml.safe_load(rules)["spec"]["groups"]
            for rule in group["rules"]
            for name in selected_metrics(rule["expr"])
        }
        assert missing_metrics(used, scrape_families(text)) == set()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    "dynquota.io", "v1alpha1", "dynamicquotapolicies", policy
                )
    output = log.read_text()
    assert proc.returncode in (0, -signal.SIGTERM), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    if runner.kind == "chroot":
        # Nothing written outside /tmp (the chart: readOnlyRootFilesystem, emptyDir on /tmp).
        after = snapshot(runner.rootfs)
        changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        assert changed == set()


def test_demo_in_the_image_is_a_clear_message(runner: Runner, tmp_path: Path) -> None:
    """`dynquota demo` needs a source checkout (the image holds no demo): one line, exit 2."""
    files = tmp_path / "files"
    files.mkdir()
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = runner.popen(["dynquota", "demo"], {}, files, out)
        proc.wait(timeout=60)
    output = log.read_text()
    assert proc.returncode == 2, output
    assert "Traceback" not in output
    (line,) = output.strip().splitlines()
    assert line.startswith("dynquota: error: dynquota demo runs from a dynquota source checkout")
    assert "source checkout" in line
