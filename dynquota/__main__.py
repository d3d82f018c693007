"""``python -m dynquota``: the ``dynquota`` command (:func:`dynquota.cli.main`)."""

from dynquota.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m dynquota"))
