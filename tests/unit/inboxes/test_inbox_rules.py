"""The pure half of watched inboxes: path rules, identities, what is new, when to sweep,
where a local file goes once its job ended."""

from __future__ import annotations

import datetime as dt

import pytest

from daemon.inboxes.local import path_problems
from daemon.inboxes.models import Candidate, identity, next_sweep_at, settled_folder, untaken


@pytest.mark.parametrize(("path", "problems"), [
    ("scans", []),
    ("scans/invoices", []),
    ("scans/..data", []),  # a name that starts with two dots is not a parent
    ("", ["path should not be empty"]),
    ("   ", ["path should not be empty"]),
    ("..", ["path must not contain '..'"]),
    ("a/../../etc", ["path must not contain '..'"]),
    ("a\\..\\etc", ["path must not contain '..'"]),
    ("/etc", ["path must be relative to inboxes.local_root, not absolute"]),
    ("\\etc", ["path must be relative to inboxes.local_root, not absolute"]),
    ("a\0b", ["path must not contain NUL bytes"]),
    ("a\ud800", ["path must be valid Unicode text"]),
    ("a\udcff", ["path must be valid Unicode text"]),
])
def test_path_rules(path: str, problems: list[str]) -> None:
    assert path_problems(path) == problems


def test_an_identity_changes_with_any_of_its_parts() -> None:
    base = identity("local", "a.pdf", 10, 1_000)
    assert len(base) == 64 and base == identity("local", "a.pdf", 10, 1_000)
    assert len({base, identity("local", "a.pdf", 11, 1_000), identity("local", "a.pdf", 10, 1_001),
                identity("local", "b.pdf", 10, 1_000), identity("s3", "a.pdf", 10, 1_000)}) == 5
    # Parts are kept apart: "ab" + "c" is not "a" + "bc".
    assert identity("s3", "ab", "c") != identity("s3", "a", "bc")


def test_untaken_keeps_the_new_files_once_in_order() -> None:
    a, b, c = (Candidate(identity=name, name=name) for name in "abc")
    assert untaken([a, b, c, b], taken={"a"}) == [b, c]
    assert untaken([a], taken={"a"}) == []


def test_an_inbox_is_due_an_interval_after_its_last_sweep_or_at_once() -> None:
    now = dt.datetime(2026, 11, 24, 12, tzinfo=dt.UTC)
    assert next_sweep_at(None, 30, now) == now
    assert next_sweep_at(now - dt.timedelta(seconds=10), 30, now) == now + dt.timedelta(seconds=20)


@pytest.mark.parametrize(("status", "folder"), [
    ("COMPLETED", "done"), ("FAILED", "failed"), ("CANCELLED", "failed"),
    ("QUEUED", None), ("RUNNING", None), ("PENDING", None),
])
def test_where_a_file_goes_once_its_job_ended(status: str, folder: str | None) -> None:
    assert settled_folder(status) == folder
