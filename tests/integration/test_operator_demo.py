"""`dynquota demo --fast` end to end: its own control plane, the real ReplicaSet controller,
the operator, and everything stopped afterwards (what `make demo` runs, shorter)."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from pathlib import Path


def _steps(line: str, first: int, last: int, slack: int = 5) -> list[int]:
    """The ``a -> b -> ...`` sequence of hard values at the end of ``line``, checked: it starts
    at ``first`` (the minimum), ends at ``last`` (the maximum) or at most ``slack`` above it, and
    every step rises to at most ``ceil(1.4 x (previous + slack))``. The exact steps depend on
    when the operator reads usage: quota admission can admit a few over hard (a recount from a
    lagging informer erases a charge, kubernetes#123434; 5 pods past 56 seen on a loaded
    machine), and the operator then raises to that usage at once, even past the maximum."""
    steps = [int(v) for v in line.rsplit(": ", 1)[1].split(" -> ")]
    assert steps[0] == first, line
    assert last <= steps[-1] <= last + slack, line  # above the maximum: raised to usage
    for before, after in itertools.pairwise(steps):
        assert before < after <= min(last + slack, math.ceil(1.4 * (before + slack))), line
    return steps


def test_demo_runs_and_cleans_up(tmp_path: Path) -> None:
    picture = tmp_path / "demo.png"
    done = subprocess.run(
        [sys.executable, "-m", "dynquota.cli", "demo", "--fast", "--picture", str(picture)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    out = done.stdout
    print(out)  # shown by pytest when an assertion below fails
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    # 60 is the maximum; quota admission itself may admit a few more during the burst
    # (a recount from a lagging informer erases a charge: docs/known-gaps.md, kubernetes#123434)
    throttled = re.search(r"2\. demo-runaway: throttled to (\d+) pods instead of 100000: ", out)
    assert throttled is not None, out[-3000:]
    assert 60 <= int(throttled.group(1)) <= 65, throttled.group(0)
    _steps(throttled.string[throttled.start() :].splitlines()[0], 10, 60)
    secrets = re.search(
        r"2\. demo-runaway: (\d+) Secrets, then 403 exceeded quota at the maximum: secrets "
        r"([\d >-]+) \(sized from the quota's status\.used; dynquota cannot read Secrets\)",
        out,
    )
    assert secrets is not None, out[-3000:]
    assert 28 <= int(secrets.group(1)) <= 33, secrets.group(0)
    _steps(": " + secrets.group(2), 10, 28)
    assert "1. demo-web: all 20 pods created, in steps of one cooldown" in out
    assert "3. demo-helm: install re-run, all 100 ConfigMaps created under the override" in out
    assert "4. demo-helm: override expired, configmaps sized from the peak usage" in out
    assert "5. every managed quota deleted; none is created while engaged" in out
    assert "5. engaged for 4s: managed quotas re-created: []" in out
    assert "5. quotas re-created from current usage" in out
    # the operator (not the demo) woke the runaway's ReplicaSet after a raise
    assert "dynquota woke demo-runaway: woke 1 workload(s) whose pod creates" in out
    # two teams under one QuotaBudget of 60 ConfigMaps: the runaway's steps depend on when the
    # operator sees its usage, where it ends does not (the last free unit goes to team-a)
    # (37 plus kube-root-ca.crt fill its slice of 38; admission may admit one more: #123434)
    assert re.search(
        r"6\. demo-team-b: 3[78] ConfigMaps, then 403 exceeded quota at its slice: 10 -> ", out
    ), out[-3000:]
    assert "-> 38 (only the free budget)" in out
    assert "-> 22, usage 21 throughout: shrunk towards its usage as the room was shared, " in out
    assert (
        "6. budget 60: demo-team-a 22 + demo-team-b 38 = 60 enforced; the runaway gets no more "
        "(granted at each step, max(spec.hard, status.hard) from one LIST: at most 60)"
    ) in out
    # 7: the README's commands: the at-risk view as the admin, the tenant view as alice (admin in
    # demo-team-b only), and one line refusing her demo-team-a's
    act = out[out.index("7. the README's commands on this cluster") :]
    risk = act[act.index("$ kubectl dynquota plan --local --at-risk") :]
    assert re.search(r"\n\s+demo-team-b\s+configmaps\s+at limit\s+100%\s+", risk), act
    assert re.search(r"\n\s+\d+ keys at risk in \d+ of \d+ namespaces: \d+ at limit", risk), act
    tenant = act[act.index("$ kubectl dynquota status -n demo-team-b --as alice") :]
    assert "\n      namespace: demo-team-b\n      state: Enforced (as of " in tenant, act
    assert "\n      policy: demo-teams\n" in tenant, act
    assert "\n      budget: demo-tenant (used, granted and free as of " in tenant, act
    # the slice is written on change; used, granted and free at most every 5 minutes
    assert re.search(r"\n\s+configmaps\s+60\s+38\s+\d+\s+\d+\s+\d+\n", tenant), act
    other = act[act.index("$ kubectl dynquota status -n demo-team-a --as alice") :]
    assert 'User "alice" cannot get resource "applieddynamicquotas"' in other.splitlines()[1]
    assert out.rstrip().endswith("everything stopped: control plane, operator, temporary files.")
    # The picture of hard and usage over time (matplotlib, the `demo` extra `make setup` installs).
    assert f"    picture: {picture}\n" in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size > 20_000
    # the operator runs in a thread: kopf's expected "OS signals are ignored" line is dropped
    assert "OS signals are ignored" not in done.stderr + out
