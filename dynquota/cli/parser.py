"""The argument parser of ``dynquota``: one subcommand per module of :mod:`dynquota.cli`."""

from __future__ import annotations

import argparse
from pathlib import Path

from dynquota.cli.admin import cmd_kill_switch, cmd_override
from dynquota.cli.cleanup import cmd_cleanup
from dynquota.cli.completion import cmd_completion
from dynquota.cli.demo import cmd_demo
from dynquota.cli.fit import cmd_fit
from dynquota.cli.flags import add_connection_flags, add_namespace_flags, add_output_flag
from dynquota.cli.plan import cmd_plan
from dynquota.cli.run import cmd_run
from dynquota.cli.status import cmd_status
from dynquota.settings import add_run_flags

__all__ = ["build_parser"]


def build_parser(prog: str = "dynquota") -> argparse.ArgumentParser:
    """The argument parser of ``dynquota`` (``prog``: the command name its messages show).

    Each subcommand sets ``handler`` (``args -> exit code``); ``run``'s flags are
    :data:`dynquota.settings.RUN_FLAGS`."""
    from dynquota import __version__

    parser = argparse.ArgumentParser(
        prog=prog, description="Size one ResourceQuota per namespace from observed usage."
    )
    parser.add_argument("--version", action="version", version=f"dynquota {__version__}")
    add_connection_flags(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True)

    run = add_run_flags(commands.add_parser("run", help="run the operator"))
    run.set_defaults(handler=cmd_run)

    plan = commands.add_parser("plan", help="show what the operator would do now (read-only)")
    add_connection_flags(plan)
    add_namespace_flags(plan)
    plan.add_argument(
        "--operator-namespace", default="", help="the operator's namespace (excluded)"
    )
    plan.add_argument(
        "--release", help="the Helm release whose settings to use (default: the only one)"
    )
    plan.add_argument("--release-namespace", help="the namespace of that release")
    plan.add_argument(
        "--local",
        action="store_true",
        help="use the local DYNQUOTA_* environment instead of the release's settings",
    )
    add_output_flag(plan)
    plan.add_argument(
        "--at-risk",
        action="store_true",
        help="only the keys at or near their limit, throttled, frozen or over budget, most "
        "urgent first, with a summary line",
    )
    plan.set_defaults(handler=cmd_plan)

    status = commands.add_parser(
        "status",
        help="what governs a namespace: its policy's bounds, next raises, override rules, "
        "budget and slice (reads only its AppliedDynamicQuota: a tenant's view role suffices)",
    )
    add_connection_flags(status)
    status.add_argument(
        "-n", "--namespace", help="the namespace (default: the kubeconfig context's, as kubectl)"
    )
    add_output_flag(status)
    status.set_defaults(handler=cmd_status)

    fit = commands.add_parser(
        "fit",
        help="will a workload fit the namespace's quotas, and when: pods that fit now, the "
        "raises to come (cooldowns, maximum, budget) and what blocks the rest (exit 0: all fit "
        "now; 1: some only later or never)",
    )
    add_connection_flags(fit)
    fit.add_argument(
        "-f",
        "--filename",
        required=True,
        help="the manifest: a Deployment, ReplicaSet, StatefulSet, Job or Pod (YAML or JSON, "
        "several documents; - reads stdin)",
    )
    fit.add_argument(
        "-n",
        "--namespace",
        help="the namespace (default: the manifest's, else the kubeconfig context's)",
    )
    fit.add_argument(
        "--replicas", type=int, help="evaluate this many pods of each workload instead"
    )
    add_output_flag(fit)
    fit.set_defaults(handler=cmd_fit)

    override = commands.add_parser(
        "override",
        help="request the tenant override (it lasts the configured TTL: the governing policy's "
        "spec.override.ttl, else the operator's overrideTTL)",
    )
    override.add_argument("namespace")
    override.add_argument("--off", action="store_true", help="cancel the override")
    add_connection_flags(override)
    override.set_defaults(handler=cmd_override)

    kill = commands.add_parser("kill-switch", help="the admin kill switch")
    kill.add_argument("state", choices=("on", "off", "status"))
    add_connection_flags(kill)
    add_output_flag(kill)
    kill.set_defaults(handler=cmd_kill_switch)

    cleanup = commands.add_parser(
        "cleanup", help="delete every managed quota (after uninstalling the operator)"
    )
    cleanup.add_argument("--yes", action="store_true", help="really delete (else: list)")
    cleanup.add_argument(
        "--scale-down",
        metavar="DEPLOYMENT",
        help="first scale this operator Deployment (in $DYNQUOTA_NAMESPACE) to 0 and wait",
    )
    cleanup.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for pods")
    cleanup.add_argument(
        "--qps",
        type=float,
        help="deletes per second at most (default: $DYNQUOTA_KILL_SWITCH_DELETE_QPS, 20)",
    )
    cleanup.add_argument(
        "--concurrency", type=int, default=16, help="deletes in flight at most (default 16)"
    )
    cleanup.add_argument(
        "--deadline",
        type=float,
        help="seconds for the deletes of one round (default: count / qps + 30)",
    )
    cleanup.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        help="seconds between two progress lines (default 5)",
    )
    cleanup.add_argument(
        "--limit-ranges",
        action="store_true",
        help="then also delete the companion LimitRanges dynquota created (named dynquota and "
        "labelled managed-by=dynquota; listed only without --yes)",
    )
    cleanup.add_argument("-v", "--verbose", action="store_true", help="one line per deleted quota")
    add_connection_flags(cleanup)
    cleanup.set_defaults(handler=cmd_cleanup)

    demo = commands.add_parser("demo", help="run the demo on a local control plane")
    demo.add_argument(
        "--fast", action="store_true", help="shorter scenario (for tests), about 2 minutes"
    )
    demo.add_argument(
        "--picture",
        type=Path,
        help="where to write the picture of hard and usage over time (PNG, or SVG by suffix; "
        "default: a new file under $TMPDIR/dynquota-demo/)",
    )
    demo.set_defaults(handler=cmd_demo)

    completion = commands.add_parser(
        "completion", help="print the shell completion script (source it: see docs/operator.md)"
    )
    completion.add_argument("shell", choices=("bash", "zsh"))
    completion.set_defaults(handler=cmd_completion)
    return parser
