"""``python -m dynquota.cli``: the ``dynquota`` command (as ``python -m dynquota``)."""

from dynquota.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
