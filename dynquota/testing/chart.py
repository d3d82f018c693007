"""The chart's objects the test bed installs without Helm releasing them (I/O: runs ``helm
template``): the operator's RBAC and the admission policies every operator test runs under;
and :func:`helm`, a release installed as users install it.

One road for every render (:func:`helm_template`), so the RBAC the tests use and the Lease fence
they install come from the chart exactly as a release renders them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from dynquota.testing.controlplane import ControlPlaneError, LocalControlPlane

__all__ = [
    "APPLIED_CRD",
    "BUDGET_CRD",
    "BUDGET_GUARD",
    "CHART",
    "CRD",
    "LEASE_FENCE",
    "helm",
    "helm_template",
    "render_lease_fence",
    "render_rbac",
]

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "helm" / "dynquota"
CRD: Final = ROOT / "crds" / "dynamicquotapolicies.yaml"
BUDGET_CRD: Final = ROOT / "crds" / "quotabudgets.yaml"
APPLIED_CRD: Final = ROOT / "crds" / "applieddynamicquotas.yaml"
BUDGET_GUARD: Final = "dynquota-budget-guard"
"""The chart's budget guard policy and binding as the tests install them (release ``dynquota``,
``templates/budget-admission-policy.yaml``)."""
LEASE_FENCE: Final = "dynquota-lease-fence"
"""The chart's Lease fence, policy and binding, as release ``dynquota`` names them."""


def helm_template(
    cp: LocalControlPlane, namespace: str, templates: Sequence[str], sets: Sequence[str] = ()
) -> str:
    """``templates`` (paths under the chart, e.g. ``templates/clusterrole.yaml``) rendered as
    release ``dynquota`` in ``namespace`` with ``--set`` values ``sets``, as YAML.

    Raises:
        ControlPlaneError: the chart is not there (not a source checkout).
        subprocess.CalledProcessError: helm failed.
    """
    assert cp.bin_dir is not None
    if not CHART.exists():
        raise ControlPlaneError(
            f"{CHART} not found: the demo and the tests run from a dynquota source checkout"
        )
    argv = [str(cp.bin_dir / "helm"), "template", "dynquota", str(CHART), "--namespace", namespace]
    argv += [arg for value in sets for arg in ("--set", value)]
    argv += [arg for template in templates for arg in ("--show-only", template)]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


def helm(cp: LocalControlPlane, home: Path, *args: str) -> None:
    """Run ``helm *args`` against ``cp`` as admin (5 minutes at most), its config, cache and
    data under ``home`` (a test's own directory: no state shared with the user's Helm).

    Raises:
        AssertionError: helm exited non-zero (its output in the message).
    """
    assert cp.bin_dir is not None
    env = {**os.environ, "HELM_CONFIG_HOME": str(home / "c"), "HELM_CACHE_HOME": str(home / "k"),
           "HELM_DATA_HOME": str(home / "d")}  # fmt: skip
    done = subprocess.run(
        [str(cp.bin_dir / "helm"), "--kubeconfig", cp.kubeconfig, *args],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def render_rbac(cp: LocalControlPlane, namespace: str) -> str:
    """The chart's ServiceAccount, ClusterRole(+Binding), leader-election Role, the budget guard
    (:data:`BUDGET_GUARD`: it matches only namespaces labelled ``dynquota.io/budget``) and the
    operator-confinement admission policy (``templates/operator-policy.yaml``: what the
    operator's token may write), as YAML: every operator test runs with both in force.
    Raises what :func:`helm_template` raises."""
    templates = (
        "templates/serviceaccount.yaml",
        "templates/clusterrole.yaml",
        "templates/budget-admission-policy.yaml",
        "templates/operator-policy.yaml",
        "templates/tenant-view.yaml",
    )
    # leader election is the default; set so the leader-election Role renders
    return helm_template(cp, namespace, templates, ["leaderElection.enabled=true"])


def render_lease_fence(cp: LocalControlPlane, namespace: str) -> str:
    """The chart's Lease fence (:data:`LEASE_FENCE`, for the Lease ``dynquota`` in
    ``namespace``) as YAML. Raises what :func:`helm_template` raises."""
    return helm_template(cp, namespace, ["templates/lease-fence-policy.yaml"])
