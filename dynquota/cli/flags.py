"""The kubectl-like flags every cluster command shares: who and where (``--kubeconfig``,
``--context``, ``--as``, ``--as-group``, ``--as-uid``), and for read commands which
namespaces (``-n``, ``-A``, ``-l``) and how to print (``-o``).

kubectl does not pass its global flags to plugins (``kubectl --as alice dynquota plan`` runs
the plugin without them), so the command parses them itself, before or after the subcommand
(``dynquota --context c plan`` and ``dynquota plan --context c`` are the same): the
subcommand's copies default to ``argparse.SUPPRESS`` so they never overwrite a value given
before it (a flag given on both sides: the one after the subcommand wins, ``--as-group``'s
list included).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OUTPUTS",
    "Target",
    "add_connection_flags",
    "add_namespace_flags",
    "add_output_flag",
    "given",
    "target_of",
]

_TOP = "top_"
"""The ``dest`` prefix of the connection flags given before the subcommand."""

OUTPUTS = ("table", "wide", "json", "yaml", "jsonpath=TEMPLATE")
"""The ``-o`` formats of read commands, as ``--help`` lists them."""


@dataclass(frozen=True)
class Target:
    """Where and as whom a command talks: the kubeconfig path (``None``: ``$KUBECONFIG``, the
    default file or in-cluster), the context (``None``: current), and the impersonation
    flags (``None``: not given, the kubeconfig's own ``as*`` fields apply)."""

    kubeconfig: str | None = None
    context: str | None = None
    as_user: str | None = None
    as_uid: str | None = None
    as_groups: tuple[str, ...] | None = None


def add_connection_flags(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """Add ``--kubeconfig``, ``--context``, ``--as``, ``--as-group`` (repeatable) and
    ``--as-uid`` to ``parser``. ``top``: the main parser, whose values are stored under
    ``top_<dest>`` (a subcommand's own defaults, such as ``run``'s ``--kubeconfig``, would
    overwrite a shared ``dest``); the subcommands' copies default to ``SUPPRESS``.
    :func:`target_of` merges both."""
    default = None if top else argparse.SUPPRESS
    prefix = _TOP if top else ""
    group = parser.add_argument_group("cluster and identity (as kubectl's)")
    group.add_argument(
        "--kubeconfig",
        dest=f"{prefix}kubeconfig",
        default=default,
        help="path of the kubeconfig file",
    )
    group.add_argument(
        "--context", dest=f"{prefix}context", default=default, help="the kubeconfig context"
    )
    group.add_argument(
        "--as",
        dest=f"{prefix}as_user",
        metavar="USER",
        default=default,
        help="impersonate this user (replaces the kubeconfig user's `as`)",
    )
    group.add_argument(
        "--as-group",
        dest=f"{prefix}as_groups",
        metavar="GROUP",
        action="append",
        default=default,
        help="impersonate this group, repeatable (replaces `as-groups`)",
    )
    group.add_argument(
        "--as-uid",
        dest=f"{prefix}as_uid",
        metavar="UID",
        default=default,
        help="impersonate this UID",
    )


def add_namespace_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``-n/--namespace`` (repeatable), ``-A/--all-namespaces`` and ``-l/--selector``
    (a label selector on namespaces, sent to the apiserver)."""
    parser.add_argument(
        "-n", "--namespace", action="append", help="only this namespace (repeatable)"
    )
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (the default without -n or -l)",
    )
    parser.add_argument(
        "-l",
        "--selector",
        help="only namespaces with these labels (kubectl's syntax: a=b,c!=d,e in (f),!g)",
    )


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``-o/--output`` (:data:`OUTPUTS`; default ``table``)."""
    parser.add_argument(
        "-o",
        "--output",
        default="table",
        type=_output,
        metavar="FORMAT",
        help="table (default), wide, json, yaml or jsonpath=TEMPLATE (kubectl's syntax)",
    )


def _output(text: str) -> str:
    """Validate a ``-o`` value (``argparse`` type); ``jsonpath`` and ``jsonpath=`` without a
    template pass here and are refused before the command runs, with kubectl's words
    (:func:`dynquota.cli.output.check_output`)."""
    if text in ("table", "wide", "json", "yaml", "jsonpath") or text.startswith("jsonpath="):
        return text
    raise argparse.ArgumentTypeError(
        f"unknown output format {text!r}: one of table, wide, json, yaml, jsonpath=TEMPLATE"
    )


def given(args: argparse.Namespace, dest: str) -> Any:
    """The value of connection flag ``dest`` (``kubeconfig``, ``context``, ``as_user``,
    ``as_groups``, ``as_uid``): after the subcommand if given there, else before it, else
    ``None``."""
    after = getattr(args, dest, None)
    return after if after is not None else getattr(args, f"{_TOP}{dest}", None)


def target_of(args: argparse.Namespace) -> Target:
    """The :class:`Target` the parsed ``args`` ask for (absent flags: ``None``)."""
    groups = given(args, "as_groups")
    return Target(
        kubeconfig=given(args, "kubeconfig") or None,
        context=given(args, "context") or None,
        as_user=given(args, "as_user"),
        as_uid=given(args, "as_uid"),
        as_groups=tuple(groups) if groups is not None else None,
    )
