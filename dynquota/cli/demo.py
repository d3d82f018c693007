"""``dynquota demo``: the demo on a local control plane (:mod:`dynquota.demo`)."""

from __future__ import annotations

import argparse

from dynquota.cli.errors import UserError

__all__ = ["DEMO_NEEDS", "cmd_demo"]

DEMO_NEEDS = (
    "dynquota demo needs the 'testing' extra ({missing} is not installed) and a dynquota "
    "source checkout: it builds and starts a local control plane from the repository (git "
    "clone, then `make demo`); the operator image does not include it"
)
"""The one line ``dynquota demo`` fails with where the test bed is not installed (the
operator image): ``{missing}`` is the module that could not be imported."""


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on a local control plane.

    Raises:
        UserError: the ``testing`` extra is not installed (as in the operator image: the
            launcher needs ``cryptography``, the test bed the sync ``kubernetes`` client).
    """
    try:
        from dynquota.demo import main as demo_main
    except ImportError as exc:
        raise UserError(DEMO_NEEDS.format(missing=exc.name or exc)) from exc
    return demo_main(fast=args.fast, picture=args.picture)
