"""The demo's closing act (issue #28): the README's commands on the demo's cluster.

As the admin, ``dynquota plan --local --at-risk`` (``--local``: the demo installs no Helm
release whose settings ``plan`` would read) lists the keys at or near their limit, throttled,
frozen or over budget, with its summary line; as ``alice``, a tenant holding only the built-in
``admin`` role in ``demo-team-b`` (bound here), ``dynquota status -n demo-team-b --as alice``
prints what governs her namespace (the AppliedDynamicQuota the operator writes) and the same
command for ``demo-team-a`` is refused with one line. Each command runs as a new process
(``python -m dynquota``, as a user runs it) with the demo's admin kubeconfig; its output is
printed as is.
"""

from __future__ import annotations

import subprocess
import sys

from dynquota.demo.budget_act import TEAM_A, TEAM_B
from dynquota.demo.watch import DemoWatch
from dynquota.names import APPLIED_PLURAL, GROUP, VERSION
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import wait_until

__all__ = ["TENANT_USER", "cli_act"]

TENANT_USER = "alice"
"""The tenant the act impersonates (``--as``): ``admin`` in :data:`TEAM_B` only."""


def cli_act(demo: DemoWatch) -> None:
    """Run the commands and print them with their output (``7. ...``). Raises
    ``WaitTimeoutError`` when team-b's projection does not appear in time, ``RuntimeError``
    when a command's exit code is not the expected one."""
    c, show = demo.c, demo.show
    bind_cluster_role(c.api, TEAM_B, TENANT_USER, "admin")

    def projected() -> bool:
        """team-b's projection shows the slice its quota holds now (written on change)."""
        items = c.custom.list_namespaced_custom_object(
            GROUP, VERSION, TEAM_B, APPLIED_PLURAL, _request_timeout=30
        )["items"]
        budget = ((items[0].get("status") or {}).get("budget") or {}) if items else {}
        quota = c.quota(TEAM_B)
        hard = (quota.spec.hard or {}) if quota else {}
        return "configmaps" in hard and budget.get("slice") == {"configmaps": hard["configmaps"]}

    wait_until(projected, f"the tenant projection in {TEAM_B} with its slice", timeout=60)
    show.line("demo", "7. the README's commands on this cluster")
    kubeconfig = str(c.cp.kubeconfig)
    _run(["plan", "--local", "--at-risk"], kubeconfig, expect=0)
    _run(["status", "-n", TEAM_B, "--as", TENANT_USER], kubeconfig, expect=0)
    _run(["status", "-n", TEAM_A, "--as", TENANT_USER], kubeconfig, expect=None)


def _run(argv: list[str], kubeconfig: str, expect: int | None) -> None:
    """Print ``$ kubectl dynquota ARGV`` and its output, indented; ``expect``: the exit code
    required (``None``: any non-zero). Raises ``RuntimeError`` on another exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "dynquota", "--kubeconfig", kubeconfig, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(f"    $ kubectl dynquota {' '.join(argv)}", flush=True)
    for line in (done.stdout + done.stderr).rstrip("\n").splitlines():
        print(f"      {line}", flush=True)
    wrong = done.returncode != expect if expect is not None else done.returncode == 0
    if wrong:
        raise RuntimeError(f"kubectl dynquota {' '.join(argv)} exited {done.returncode}")
