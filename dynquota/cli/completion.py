"""Shell completion, argparse-native (no argcomplete): the candidates for a partial command
line are computed from the parser itself (:func:`candidates`), so a new flag completes
without a new script.

- ``dynquota completion bash`` / ``zsh`` prints a script to ``source``: the shell calls the
  hidden ``dynquota __complete WORDS... PARTIAL``, which prints one candidate a line.
- ``kubectl dynquota <TAB>``: kubectl (1.26+) runs ``kubectl_complete-dynquota WORDS...
  PARTIAL`` from ``$PATH`` and reads cobra's format: candidates, then ``:4`` (no file
  completion) as the last line (:func:`kubectl_complete`).

Commands, flags and fixed values (``-o``'s formats, ``kill-switch on|off|status``)
complete; namespace names do not (that would need a cluster read on every TAB).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["COMPLETE", "bash_script", "candidates", "cmd_completion"]

COMPLETE = "__complete"
"""The hidden first argument the script passes: ``dynquota __complete WORDS... PARTIAL``
prints the candidates (handled by :func:`dynquota.cli.main` before parsing: argparse would
read the words as flags)."""

_FORMATS = ("table", "wide", "json", "yaml", "jsonpath=")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


def candidates(parser: argparse.ArgumentParser, words: Sequence[str]) -> list[str]:
    """What may come at the last of ``words`` (the words after the program name; the last
    one is the partial word, ``""`` for none), sorted, those starting with it. Pure."""
    *done, partial = list(words) or [""]
    commands = _subparsers(parser)
    command = next((w for w in done if w in commands), None)
    options = _options(parser)
    if command is not None:
        options |= _options(commands[command])
    previous = done[-1] if done else ""
    wanted = options.get(previous)
    if wanted is not None and wanted.nargs != 0:
        if previous in ("-o", "--output"):
            return [f for f in _FORMATS if f.startswith(partial)]
        return sorted(str(c) for c in wanted.choices or () if str(c).startswith(partial))
    if partial.startswith("-"):
        return sorted(o for o in options if o.startswith(partial) and o not in ("-h", "--help"))
    if command is None:
        return sorted(c for c in commands if c.startswith(partial))
    positional = [
        a
        for a in commands[command]._actions
        if not a.option_strings and a.choices is not None and a.dest != "help"
    ]
    return sorted(str(c) for a in positional for c in a.choices or () if str(c).startswith(partial))


def bash_script(prog: str = "dynquota") -> str:
    """The bash (and zsh, through ``bashcompinit``) completion script for ``prog``."""
    return (
        f"_{prog}_complete() {{\n"
        "    local IFS=$'\\n'\n"
        f'    COMPREPLY=($({prog} __complete "${{COMP_WORDS[@]:1:COMP_CWORD}}" 2>/dev/null))\n'
        "}\n"
        f"complete -o default -F _{prog}_complete {prog}\n"
    )


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the completion script for ``args.shell`` (``bash`` or ``zsh``)."""
    script = bash_script()
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    print(script, end="")
    return 0
