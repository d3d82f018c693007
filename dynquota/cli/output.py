"""How read commands print (pure): tabwriter-style tables and ``-o json|yaml|jsonpath=``.

Tables are plain columns two spaces apart, padded with spaces only (no box drawing, no
colour), as kubectl's ``printers.GetNewTabWriter`` prints them, so ``awk``, ``cut`` and
``grep`` read them. ``-o jsonpath=TEMPLATE`` follows kubectl's template syntax
(``k8s.io/client-go/util/jsonpath``) for what scripts use most: literal text, and
``{EXPR}`` where ``EXPR`` is a JSONPath (``.rows[*].namespace``, ``.rows[0].target``;
evaluated by jsonpath-ng, a maintained PyPI library), several matches printed space-separated;
``{"\\n"}`` and ``{"\\t"}`` print a newline and a tab. kubectl's ``{range}``/``{end}`` and
filter expressions are not supported (a template with them is refused with one line). As
kubectl's, jsonpath output ends where the template ends (no newline added: ``{"\\n"}`` adds
one), and ``jsonpath=`` without a template is an error (kubectl's ``template format specified
but no template given``), not the whole document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "NO_TEMPLATE",
    "OutputError",
    "check_output",
    "columns",
    "render_document",
    "render_jsonpath",
]


class OutputError(ValueError):
    """A ``-o`` value that cannot be applied (the message says why)."""


NO_TEMPLATE = "template format specified but no template given"
"""kubectl's words (``k8s.io/cli-runtime``'s ``JSONPathPrintFlags``) for ``-o jsonpath=``."""


def check_output(output: str) -> None:
    """Raises :class:`OutputError` for a ``-o`` value that cannot print anything whatever the
    document: ``jsonpath`` or ``jsonpath=`` without a template (:data:`NO_TEMPLATE`). Run
    before the command asks the cluster, as kubectl builds its printer first."""
    if output in ("jsonpath", "jsonpath="):
        raise OutputError(NO_TEMPLATE)


def columns(table: Sequence[Sequence[str]]) -> str:
    """Aligned columns two spaces apart (kubectl's tabwriter: minwidth 0, padding 2); the
    last column is not padded, trailing spaces are stripped."""
    if not table:
        return ""
    count = max(len(row) for row in table)
    widths = [
        max((len(row[i]) for row in table if i < len(row)), default=0) for i in range(count - 1)
    ]
    lines = []
    for row in table:
        cells = [c.ljust(widths[i]) if i < count - 1 else c for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render_document(document: Any, output: str) -> str:
    """``document`` (plain JSON values) as ``output``, the exact text to write: ``json``
    (2-space indent) and ``yaml`` (block style, keys in document order) end with a newline,
    ``jsonpath=TEMPLATE`` ends where its template does (kubectl adds none).

    Raises :class:`OutputError` for another format, no template or a bad one."""
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
    check_output(output)
    if output.startswith("jsonpath="):
        return render_jsonpath(document, output.removeprefix("jsonpath="))
    raise OutputError(f"output {output!r} is not a document format")


_PART = re.compile(r"\{([^{}]*)\}")


def render_jsonpath(document: Any, template: str) -> str:
    """``template`` (kubectl's jsonpath template: text and ``{EXPR}``) applied to
    ``document``. A template without braces is one expression, as kubectl reads it.

    Raises :class:`OutputError` (no template, ``{range}``/``{end}``, a filter, a malformed
    expression)."""
    from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
    from jsonpath_ng.parser import parse

    if not template:
        raise OutputError(NO_TEMPLATE)

    if "{" not in template:
        template = "{" + template + "}"
    _no_nested_action(template)
    out: list[str] = []
    position = 0
    for match in _PART.finditer(template):
        _text(template[position : match.start()], out)
        position = match.end()
        expr = match.group(1).strip()
        if expr.startswith('"') and expr.endswith('"') and len(expr) >= 2:
            out.append(expr[1:-1].replace("\\n", "\n").replace("\\t", "\t"))
            continue
        if expr.startswith(("range", "end")) or "?(" in expr:
            raise OutputError(
                f"jsonpath {{{expr}}}: range/end and filters are not supported; use -o json "
                "with jq, or a plain path such as {.rows[*].namespace}"
            )
        path = "$" + expr if expr.startswith((".", "[")) else "$." + expr if expr else "$"
        try:
            found = [m.value for m in parse(path).find(document)]
        except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
            raise OutputError(f"jsonpath {{{expr}}}: {exc}") from exc
        out.append(" ".join(_scalar(v) for v in found))
    _text(template[position:], out)
    return "".join(out)


def _no_nested_action(template: str) -> None:
    """Raises :class:`OutputError` at a ``{`` inside an open action (``{{.status}}``: a Go
    template's braces; kubectl: ``unrecognized character in action: U+007B '{'``), naming
    the template, the character and the single-brace action meant."""
    depth = 0
    for i, char in enumerate(template):
        if char == "{":
            if depth:
                inner = _PART.search(template, i)
                meant = f"; write {inner.group(0)}" if inner is not None else ""
                raise OutputError(
                    f"jsonpath template {template!r}: the '{{' at character {i + 1} opens an "
                    "action inside another: a jsonpath action takes one pair of braces, not a "
                    f"Go template's {{{{ }}}}{meant}"
                )
            depth = 1
        elif char == "}":
            depth = 0


def _text(text: str, out: list[str]) -> None:
    """Literal text of a template; a ``{`` in it opens an action never closed (kubectl:
    ``unclosed action``), raised as :class:`OutputError`."""
    if "{" in text:
        raise OutputError(f"jsonpath template {text!r}: unclosed action (a {{ without its }})")
    out.append(text)


def _scalar(value: Any) -> str:
    """A matched value as kubectl prints it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
