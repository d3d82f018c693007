"""``dynquota demo``: the demo on a local control plane (:mod:`dynquota.demo`)."""

from __future__ import annotations

import argparse

from dynquota.cli.errors import UserError

__all__ = ["DEMO_NEEDS", "cmd_demo"]

DEMO_NEEDS = (
    "dynquota demo runs from a dynquota source checkout ({missing} is not installed): it "
    "builds and starts a local control plane from the repository (git clone, then `make "
    "demo`); the wheel and the operator image hold neither the demo nor the test bed"
)
"""The one line ``dynquota demo`` fails with where the demo or the test bed is not installed
(the product wheel and the image; or a checkout without the ``testing`` extra): ``{missing}``
is the module that could not be imported."""


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on a local control plane.

    Raises:
        UserError: the demo or the test bed is not installed (the product wheel and the
            image exclude both; in a checkout, the launcher needs ``cryptography`` and the
            test bed the sync ``kubernetes`` client of the ``testing`` extra).
    """
    try:
        from dynquota.demo import main as demo_main
    except ImportError as exc:
        raise UserError(DEMO_NEEDS.format(missing=exc.name or exc)) from exc
    return demo_main(fast=args.fast, picture=args.picture)
