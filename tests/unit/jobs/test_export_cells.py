"""What a spreadsheet makes of an exported cell: text that would start a formula is kept as
text, and an items sheet gets a name Excel opens without repairing the workbook."""

from __future__ import annotations

import pytest

from daemon.http.exports import _sheet_name
from daemon.jobs.export import neutralised


@pytest.mark.parametrize("value", ["=1+1", "+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1", "\n=1+1"])
def test_a_text_that_would_start_a_formula_stays_text(value: str) -> None:
    assert neutralised(value) == "'" + value


@pytest.mark.parametrize("value", ["Acme", " =1", 12, -4.5, None])
def test_other_values_are_left_as_they_are(value: object) -> None:
    assert neutralised(value) == value


@pytest.mark.parametrize(("name", "sheet"), [
    ("items", "items"),
    ("'quoted'", "quoted"),
    ("History", "History2"),
    ("JOBS", "JOBS2"),
    ("a[b]:c*d?e/f\\g", "abcdefg"),
    ("'", "items"),
])
def test_an_items_sheet_has_a_name_excel_accepts(name: str, sheet: str) -> None:
    assert _sheet_name(name, 1) == sheet
