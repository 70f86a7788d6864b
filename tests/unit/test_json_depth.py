"""How deep a JSON body nests, told from its text (`daemon.http.requests.nests_deeper`):
brackets inside strings, escaped quotes and every scalar JSON has do not count."""

from __future__ import annotations

import json

import pytest

from daemon.http.requests import nests_deeper, parse_json_body


def nested(levels: int, inner: str = "1") -> str:
    return '{"a": [' * (levels // 2) + ("[" if levels % 2 else "") + inner + ("]" if levels % 2 else "") \
        + "]}" * (levels // 2)


@pytest.mark.parametrize("levels", [1, 2, 3, 63, 64, 65, 66, 1000])
def test_depth_is_the_levels_of_arrays_and_objects(levels: int) -> None:
    text = nested(levels, ' -1.5e+3 , true, false, null, "x" ')
    assert nests_deeper(text, 64) is (levels > 64)


def test_brackets_inside_strings_and_escapes_do_not_count() -> None:
    text = json.dumps({"a": ["[[[[" * 100, '\\"{{{{' * 100, "\\\\", "]]}}" * 100]})
    assert not nests_deeper(text, 2)
    assert nests_deeper(text, 1)


def test_a_scalar_has_no_levels() -> None:
    assert not nests_deeper('"[[[["', 0) and not nests_deeper("12", 0)


def test_four_mebibytes_of_empty_arrays_are_two_levels() -> None:
    text = "[" + ",".join(["[]"] * 1_390_000) + "]"
    assert not nests_deeper(text, 64)
    assert isinstance(parse_json_body(text.encode()), list)
