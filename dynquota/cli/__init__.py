"""The ``dynquota`` command line.

- ``dynquota run``: the operator (flags override the ``DYNQUOTA_*`` environment, see
  :class:`dynquota.settings.Settings`);
- ``dynquota plan``: a read-only table per namespace and resource: usage, status.used, hard,
  target, next action and why, with the running release's settings (found in the cluster);
  the namespaces not managed or not enforced, and why; the other quotas of each namespace;
- ``dynquota status [-n NS]``: what governs a namespace, as its tenant may read it;
- ``dynquota fit -f MANIFEST [-n NS]``: how many of a workload's pods fit now, when the rest
  fit as the quota is raised, and what blocks them (exit 1 unless all fit now);
- ``dynquota override NAMESPACE [--off]``: request (or cancel) the tenant override on the
  namespace's managed quota;
- ``dynquota kill-switch on|off|status``: the admin kill switch on ``kube-system``;
- ``dynquota cleanup [--yes] [--scale-down DEPLOYMENT]``: delete every managed quota (the
  chart's uninstall hook; ``--scale-down`` stops the operator first);
- ``dynquota demo``: a local control plane and a real workload (see :mod:`dynquota.demo`).

Every command talks to the cluster through the operator's own kubernetes_asyncio adapters
(``asyncio.run``), each request with a timeout. Errors a user can fix (no kubeconfig, cluster
unreachable, CRD missing, RBAC) are printed as one clear line on stderr with exit code 2;
other failures exit with 1.

One module per command (``run``, ``plan``, ``status``, ``fit``, ``admin``: override and
kill-switch, ``cleanup``, ``demo``), the parser in ``parser``, the error translation in ``errors``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from pydantic import ValidationError

from dynquota.cli.errors import CRD_HINT, UserError, check_kubeconfig, explain
from dynquota.cli.parser import build_parser
from dynquota.cli.run import preflight, settings_from_args

__all__ = [
    "CRD_HINT",
    "UserError",
    "build_parser",
    "check_kubeconfig",
    "explain",
    "kubectl_complete",
    "kubectl_plugin",
    "main",
    "settings_from_args",
]

_preflight = preflight  # the name the unit tests use


def _fail(message: str, code: int) -> NoReturn:
    print(f"dynquota: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _check_output(args: argparse.Namespace) -> None:
    """Refuse a ``-o`` that can print nothing (``jsonpath=`` without a template) before the
    command asks the cluster, as kubectl does; raises :class:`UserError` (exit 2)."""
    from dynquota.cli.output import OutputError, check_output

    output = getattr(args, "output", None)
    if isinstance(output, str):
        try:
            check_output(output)
        except OutputError as exc:
            raise UserError(str(exc)) from exc


def main(argv: Sequence[str] | None = None, prog: str = "dynquota") -> int:
    """Entry point of the ``dynquota`` console script; returns the exit code.

    ``prog``: the command name usage and errors show (``python -m dynquota``,
    ``kubectl dynquota``)."""
    from dynquota.cli.completion import COMPLETE, candidates

    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == [COMPLETE]:
        print("\n".join(candidates(build_parser(prog), words[1:])))
        return 0
    args = build_parser(prog).parse_args(words)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        _check_output(args)
        return handler(args)
    except UserError as exc:
        _fail(str(exc), 2)
    except ValidationError as exc:
        _fail(f"invalid setting: {exc}", 2)
    except KeyboardInterrupt:
        return 130


def kubectl_complete() -> int:
    """Entry point of the ``kubectl_complete-dynquota`` console script: kubectl (1.26+) runs
    it on ``kubectl dynquota <TAB>`` with the words typed and the partial one, and reads
    cobra's format: candidates one a line, then ``:4`` (no file completion)."""
    from dynquota.cli.completion import candidates

    for word in candidates(build_parser("kubectl dynquota"), sys.argv[1:]):
        print(word)
    print(":4")
    return 0


def kubectl_plugin() -> int:
    """Entry point of the ``kubectl-dynquota`` console script: on ``$PATH`` it makes
    ``kubectl dynquota plan`` (any command) work as a kubectl plugin; kubectl passes the
    arguments after ``dynquota`` unchanged."""
    return main(prog="kubectl dynquota")
