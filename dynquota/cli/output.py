"""How read commands print (pure): tabwriter-style tables and ``-o json|yaml|jsonpath=``.

Tables are plain columns two spaces apart, padded with spaces only (no box drawing, no
colour), as kubectl's ``printers.GetNewTabWriter`` prints them, so ``awk``, ``cut`` and
``grep`` read them. ``-o jsonpath=TEMPLATE`` follows kubectl's template syntax
(``k8s.io/client-go/util/jsonpath``, ``parser.go`` and ``jsonpath.go``) for what scripts use
most: text outside braces printed as it is (``.kind`` and spaces too: kubectl parses an
``-o jsonpath=`` template as given), and ``{EXPR}`` where ``EXPR`` is a JSONPath
(``.rows[*].namespace``, ``.rows[0].target``; evaluated by jsonpath-ng, a maintained PyPI
library), several matches printed space-separated, maps and lists as compact JSON; ``{@}`` the
whole document; ``{"\\n"}`` and ``{"\\t"}`` print a newline and a tab. kubectl's
``{range}``/``{end}`` and filter expressions are not supported (a template with them is refused
with one line). As kubectl's, jsonpath output ends where the template ends (no newline added:
``{"\\n"}`` adds one), and ``jsonpath=`` without a template is an error (kubectl's ``template
format specified but no template given``), not the whole document; the template is parsed
before the cluster is asked (:func:`check_output`).
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
    document: ``jsonpath`` or ``jsonpath=`` without a template (:data:`NO_TEMPLATE`), or a
    template that does not parse (:func:`render_jsonpath`). Run before the command asks the
    cluster, as kubectl builds its printer (and parses the template) first."""
    if output in ("jsonpath", "jsonpath="):
        raise OutputError(NO_TEMPLATE)
    if output.startswith("jsonpath="):
        _compile(output.removeprefix("jsonpath="))


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


_Part = tuple[str, Any]
"""One piece of a parsed template: ``("text", str)`` (printed as is) or ``("path", path)``
where ``path`` is a compiled jsonpath-ng path, ``None`` for the current object (``{@}``)."""


def render_jsonpath(document: Any, template: str) -> str:
    """``template`` (kubectl's jsonpath template) applied to ``document`` (plain JSON values).

    As ``k8s.io/client-go/util/jsonpath`` (``parser.go`` ``parseText``): text outside ``{}`` is
    printed as is, whatever it is (``.kind``, ``plain text``, spaces: kubectl's ``-o jsonpath=``
    parses the template as given; ``custom-columns`` and ``wait --for=jsonpath`` relax ``.kind``
    to ``{.kind}``, ``-o`` does not);
    ``{EXPR}`` prints what ``EXPR`` matches, several matches space-separated; ``{@}``, ``{$}``
    and ``{}`` are the current object (the whole document); ``{"\\n"}`` is text. A match that
    is a map or list prints as compact JSON (``jsonpath.go`` ``PrintResults``: Go's
    ``json.Marshal``: ``{"a":1}``, keys sorted), a string bare, anything else as JSON (``3``,
    ``true``, ``null``).

    Raises :class:`OutputError` (no template, ``{range}``/``{end}``, a filter, a malformed
    template or expression)."""
    out: list[str] = []
    for kind, part in _compile(template):
        if kind == "text":
            out.append(part)
            continue
        found = [document] if part is None else [m.value for m in part.find(document)]
        out.append(" ".join(_printed(v) for v in found))
    return "".join(out)


def _compile(template: str) -> list[_Part]:
    """``template`` parsed into text and compiled paths (:data:`_Part`), as kubectl parses it
    when it builds its printer; raises :class:`OutputError` where it cannot be used."""
    from jsonpath_ng.parser import parse

    if not template:
        raise OutputError(NO_TEMPLATE)
    parts: list[_Part] = []
    for is_action, text in _split(template):
        if not is_action:
            parts.append(("text", text))
            continue
        expr = text.strip(" \t")
        if len(expr) >= 2 and expr[0] in "\"'" and expr[-1] == expr[0]:
            parts.append(("text", _unquote(expr)))
            continue
        if expr.startswith(("range", "end")) or "?(" in expr:
            raise OutputError(
                f"jsonpath {{{expr}}}: range/end and filters are not supported; use -o json "
                "with jq, or a plain path such as {.rows[*].namespace}"
            )
        rest = expr[1:].lstrip(" \t") if expr[:1] in ("@", "$") else expr
        if not rest:
            parts.append(("path", None))
            continue
        path = "$" + _quoted_fields(rest if rest.startswith((".", "[")) else "." + rest)
        try:
            parts.append(("path", parse(path)))
        except Exception as exc:  # jsonpath-ng raises its own errors and a bare Exception
            raise OutputError(f"jsonpath {{{expr}}}: {exc}") from exc
    return parts


_BARE_FIELD = re.compile(r"[A-Za-z_@][A-Za-z0-9_@-]*|\*|")
"""A field name jsonpath-ng reads bare (its lexer's ``ID``; ``*``; empty: ``..``)."""


def _quoted_fields(path: str) -> str:
    """``path`` with kubectl's field names in jsonpath-ng's syntax: a ``\\.`` in a name is a
    dot of the name (``parser.go`` ``parseField``: ``{.hard.requests\\.cpu}``), and a name
    jsonpath-ng cannot read bare (a dot, a ``/``: ``dynquota\\.io/policy``) is quoted
    (``.'requests.cpu'``). Subscripts (``[0]``, ``['a.b']``) are copied as written."""
    if "\\" not in path and "/" not in path:
        return path
    out: list[str] = []
    i = 0
    while i < len(path):
        if path[i] == "[":
            end, quote = i + 1, ""
            while end < len(path) and (quote or path[end] != "]"):
                if quote and path[end] == "\\":
                    end += 1
                elif path[end] in "\"'":
                    quote = "" if quote == path[end] else quote or path[end]
                end += 1
            out.append(path[i : end + 1])
            i = end + 1
            continue
        if path[i] != ".":  # (jsonpath-ng reports what it cannot parse)
            out.append(path[i:])
            break
        name: list[str] = []
        i += 1
        while i < len(path) and path[i] not in ".[":
            if path[i] == "\\" and i + 1 < len(path):
                i += 1
            name.append(path[i])
            i += 1
        field = "".join(name)
        if _BARE_FIELD.fullmatch(field):
            out.append("." + field)
        else:
            out.append(".'" + field.replace("\\", "\\\\").replace("'", "\\'") + "'")
    return "".join(out)


def _split(template: str) -> list[tuple[bool, str]]:
    """``template`` as ``(is_action, text)`` pieces: text up to a ``{``, then the action up
    to its ``}`` (``parser.go``: ``parseText``, ``parseInsideAction``); a ``}`` in text is
    text, a quoted string in an action may hold braces. Raises :class:`OutputError` for an
    action not closed on its line (kubectl: ``unclosed action``), a quoted string not closed
    (``unterminated quoted string``) and a ``{`` inside an action (a Go template's ``{{ }}``:
    kubectl's ``unrecognized character in action: U+007B '{'``), naming the single-brace
    action meant."""
    pieces: list[tuple[bool, str]] = []
    position = 0
    while position < len(template):
        start = template.find("{", position)
        if start < 0:
            pieces.append((False, template[position:]))
            break
        if start > position:
            pieces.append((False, template[position:start]))
        end = _action_end(template, start)
        pieces.append((True, template[start + 1 : end]))
        position = end + 1
    return pieces


def _action_end(template: str, start: int) -> int:
    """The index of the ``}`` closing the action opened at ``start`` (:func:`_split`)."""
    quote = ""
    i = start + 1
    while i < len(template):
        char = template[i]
        if quote:
            if char in "\r\n":
                break
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\r\n":
            break
        elif char in "\"'":
            quote = char
        elif char == "{":
            inner = re.search(r"\{[^{}]*\}", template[i:])
            meant = f"; write {inner.group(0)}" if inner is not None else ""
            raise OutputError(
                f"jsonpath template {template!r}: the '{{' at character {i + 1} opens an "
                "action inside another: a jsonpath action takes one pair of braces, not a "
                f"Go template's {{{{ }}}}{meant}"
            )
        elif char == "}":
            return i
        i += 1
    if quote:
        raise OutputError(
            f"jsonpath template {template[start:]!r}: unterminated quoted string (a {quote} "
            "without its pair)"
        )
    raise OutputError(
        f"jsonpath template {template[start:]!r}: unclosed action (a {{ without its }} on its line)"
    )


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
"""Go's one-letter escapes (``strconv.UnquoteChar``); ``\\\\``, ``\\"`` and ``\\'`` are the
character itself."""


def _unquote(quoted: str) -> str:
    """A quoted string of an action as text (``parser.go`` ``UnquoteExtend``: Go's escapes, in
    single or double quotes): ``"\\n"`` a newline, ``"\\t"`` a tab, ``"\\u00e9"`` ``é``; an
    escape Go does not know is kept as written."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 5:
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code if code in "\\\"'" else match.group(0))

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, quoted[1:-1])


_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
"""What Go's ``json.Marshal`` escapes in strings beside JSON's own escapes."""


def _printed(value: Any) -> str:
    """A matched value as kubectl prints it: a string bare, a map or list as compact JSON with
    its keys sorted (Go's ``json.Marshal``), anything else as JSON (``3``, ``true``, ``null``:
    kubectl prints ``null`` since kubernetes#119883)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return re.sub("[<>&\u2028\u2029]", lambda m: _HTML[m.group(0)], text)
    return json.dumps(value)
