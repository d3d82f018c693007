"""The watch stream's decoding (dynquota._k8s.watch.decode)."""

from __future__ import annotations

import math

import pytest

from dynquota._k8s.watch import decode


def test_a_watch_event_decodes_as_the_standard_library_decodes_it() -> None:
    line = b'{"type":"MODIFIED","object":{"metadata":{"name":"p","labels":{"a":"\\u00e9"}}}}\n'
    assert decode(line) == {
        "type": "MODIFIED",
        "object": {"metadata": {"name": "p", "labels": {"a": "é"}}},
    }


def test_what_orjson_refuses_but_the_standard_library_reads_is_read() -> None:
    assert math.isnan(decode(b'{"x": NaN}')["x"])
    assert decode(b'{"x": "\\ud800"}') == {"x": "\ud800"}


@pytest.mark.parametrize("line", [b"{bad", b"", b'{"a": 1'])
def test_malformed_json_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError, match=r"(?i)expecting|unterminated|delimiter"):
        decode(line)
