"""Local inbox folders on a real filesystem: where a folder may be, what a scan takes, moving
a file aside, and inotify waking the sweeper."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from daemon.inboxes.local import PathRefused, move_beside, resolve_folder, scan
from daemon.inboxes.watch import open_watch


def test_a_folder_resolves_inside_the_root_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "scans" / "deep").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "out").symlink_to(tmp_path / "outside")
    (root / "in").symlink_to(root / "scans")
    (root / "file.txt").write_text("x")
    assert resolve_folder(str(root), "scans/deep") == root / "scans" / "deep"
    assert resolve_folder(str(root), "in") == root / "scans"  # a symlink that stays inside is fine
    for path, message in (("out", "path must name a folder inside inboxes.local_root"),
                          (".", "path must name a folder inside inboxes.local_root"),
                          ("file.txt", "path 'file.txt' is not an existing folder under inboxes.local_root"),
                          ("../root/scans", "path must not contain '..'")):
        with pytest.raises(PathRefused, match=message.replace(".", r"\.")):
            resolve_folder(str(root), path)
    # A root that is itself a symlink: what it points to is the root.
    (tmp_path / "link-root").symlink_to(root)
    assert resolve_folder(str(tmp_path / "link-root"), "scans") == root / "scans"


def test_a_scan_takes_settled_regular_files_only(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    (tmp_path / "new.txt").write_text("y")
    (tmp_path / ".hidden").write_text("z")
    (tmp_path / "done").mkdir()
    (tmp_path / "link.txt").symlink_to(tmp_path / "old.txt")
    past = time.time() - 60
    os.utime(tmp_path / "old.txt", (past, past))
    now = time.time()
    found = scan(tmp_path, settle_s=5, now=now)
    assert [c.name for c in found.candidates] == ["old.txt"]
    assert found.settles_at is not None and now < found.settles_at <= now + 5


def test_moving_aside_keeps_both_files_of_one_name(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_text("1")
    move_beside(tmp_path, "a.pdf", "done", "tag1")
    (tmp_path / "a.pdf").write_text("2")
    move_beside(tmp_path, "a.pdf", "done", "tag2")
    move_beside(tmp_path, "gone.pdf", "done", "tag3")  # already moved by another process: fine
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == ["a-tag2.pdf", "a.pdf"]
    assert (tmp_path / "done" / "a.pdf").read_text() == "1"


async def test_inotify_names_the_inboxes_whose_folder_got_a_file(tmp_path: Path) -> None:
    watch = open_watch()
    assert watch is not None  # Linux
    try:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        assert watch.watch("inbox-a", str(tmp_path / "a")) and watch.watch("inbox-b", str(tmp_path / "b"))
        assert watch.watch("inbox-a2", str(tmp_path / "a"))  # two inboxes on one folder
        assert not watch.watch("inbox-gone", str(tmp_path / "missing"))
        started = time.monotonic()
        (tmp_path / "a" / "x.txt").write_text("x")
        with trio.fail_after(2):
            assert await watch.wait() == {"inbox-a", "inbox-a2"}
        print(f"\ninotify wake-up {1000 * (time.monotonic() - started):.2f} ms after the write")
        watch.unwatch("inbox-a")
        os.replace(tmp_path / "a" / "x.txt", tmp_path / "b" / "x.txt")  # moved out of a, into b
        with trio.fail_after(2):
            assert await watch.wait() == {"inbox-b"}
        assert watch.watched() == {"inbox-a2", "inbox-b"}
    finally:
        watch.close()


async def test_a_watched_folder_removed_is_forgotten_and_watched_again_once_made_again(tmp_path: Path) -> None:
    watch = open_watch()
    assert watch is not None
    try:
        folder = tmp_path / "scans"
        folder.mkdir()
        assert watch.watch("inbox", str(folder))
        folder.rmdir()
        with trio.fail_after(2):
            assert await watch.wait() == {"inbox"}
        assert watch.watched() == set()
        folder.mkdir()
        assert watch.watch("inbox", str(folder))
        (folder / "x.txt").write_text("x")
        with trio.fail_after(2):
            assert await watch.wait() == {"inbox"}
    finally:
        watch.close()
