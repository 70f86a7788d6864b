"""Local inbox folders on a real filesystem: where a folder may be, what a scan takes, moving
a file aside, and inotify waking the sweeper."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from daemon.inboxes.local import Folder, PathRefused, move_beside, open_folder, resolve_folder, scan
from daemon.inboxes.models import identity
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
    with opened(tmp_path) as folder:
        found = scan(folder, settle_s=5, now=now)
    assert [c.name for c in found.candidates] == ["old.txt"]
    assert found.settles_at is not None and now < found.settles_at <= now + 5


def test_a_file_dated_far_ahead_is_taken_not_waited_for(tmp_path: Path) -> None:
    """A modification time past year 9999 (`touch -d @300000000000`) ended the daemon at every
    start; one a day ahead held the file until that day."""
    for name, ahead in (("far.txt", 300_000_000_000), ("tomorrow.txt", time.time() + 86_400)):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (ahead, ahead))
    with opened(tmp_path) as folder:
        found = scan(folder, settle_s=5, now=time.time())
    assert sorted(c.name for c in found.candidates) == ["far.txt", "tomorrow.txt"]
    assert found.settles_at is None


def opened(path: Path) -> Folder:
    return open_folder(str(path.parent), path.name)


def taken(path: Path) -> str:
    info = path.stat()
    return identity("local", path.name, info.st_size, info.st_mtime_ns)


def test_moving_aside_keeps_both_files_of_one_name(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_text("1")
    with opened(tmp_path) as folder:
        move_beside(folder, "a.pdf", "done", "tag1", taken(tmp_path / "a.pdf"))
        (tmp_path / "a.pdf").write_text("2")
        move_beside(folder, "a.pdf", "done", "tag2", taken(tmp_path / "a.pdf"))
        move_beside(folder, "gone.pdf", "done", "tag3", "")  # already moved by another process: fine
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == ["a-tag2.pdf", "a.pdf"]
    assert (tmp_path / "done" / "a.pdf").read_text() == "1"


def test_a_new_file_under_the_name_taken_is_not_moved_aside(tmp_path: Path) -> None:
    """A scanner writing scan.txt again just after the first one's job ended: the new file was
    moved into done/ by name, never a job (4 versions written, 3 jobs)."""
    first = tmp_path / "scan.txt"
    first.write_text("receipt 1")
    was = taken(first)
    first.write_text("receipt 2, longer")
    with opened(tmp_path) as folder:
        move_beside(folder, "scan.txt", "done", "tag1", was)
    assert first.read_text() == "receipt 2, longer" and list((tmp_path / "done").iterdir()) == []


def test_done_swapped_for_a_symlink_after_it_was_made_carries_nothing_out(tmp_path: Path) -> None:
    """Moves went by path: done/ exchanged with a symlink between the check and the rename
    (renameat2 in a loop) put 18 of 30 files, named and written by the attacker, outside the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    inbox = tmp_path / "root" / "in"
    inbox.mkdir(parents=True)
    (inbox / "a.txt").write_text("x")
    (inbox / "done").symlink_to(outside)
    with opened(inbox) as folder, pytest.raises(NotADirectoryError):
        move_beside(folder, "a.txt", "done", "t", taken(inbox / "a.txt"))
    assert list(outside.iterdir()) == [] and (inbox / "a.txt").exists()


def test_a_folder_swapped_for_a_symlink_is_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder was checked by its resolved path, then listed and read by path again: one
    swapped for a symlink between the two handed a copy of secrets.json to the inbox's owner."""
    import daemon.inboxes.local as local

    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    elsewhere = tmp_path / "secrets"
    elsewhere.mkdir()
    (elsewhere / "secrets.json").write_text("{}")
    checked = local.resolve_folder

    def then_swapped(root_: str, relative: str) -> Path:
        folder = checked(root_, relative)
        (root / "in").rename(root / "in.old")
        (root / "in").symlink_to(elsewhere)
        return folder

    monkeypatch.setattr(local, "resolve_folder", then_swapped)
    with pytest.raises(local.PathRefused, match="changed while it was opened"):
        local.open_folder(str(root), "in")


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


async def test_dot_files_and_sub_folders_wake_nothing(tmp_path: Path) -> None:
    """A sweep takes neither: a loop touching a dot-file kept the sweeper listing the folder."""
    watch = open_watch()
    assert watch is not None
    try:
        assert watch.watch("inbox", str(tmp_path))
        (tmp_path / ".swap").write_text("x")
        os.utime(tmp_path / ".swap")
        (tmp_path / "sub").mkdir()
        os.utime(tmp_path / "sub")
        with trio.move_on_after(0.3) as waited:
            await watch.wait()
        assert waited.cancelled_caught, "woken by a dot-file or a sub-folder"
        os.replace(tmp_path / ".swap", tmp_path / "scan.txt")  # a copy finished under its name
        with trio.fail_after(2):
            assert await watch.wait() == {"inbox"}
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


def test_a_long_name_taken_twice_is_moved_aside_under_a_shortened_name(tmp_path: Path) -> None:
    """The tag made a second 251-byte name 260 bytes: "File name too long" at every pass."""
    name = "L" * 251 + ".txt"
    with opened(tmp_path) as folder:
        for text in ("first", "second"):
            (tmp_path / name).write_text(text)
            move_beside(folder, name, "done", "tag12345", taken(tmp_path / name))
    moved = sorted(p.name for p in (tmp_path / "done").iterdir())
    assert len(moved) == 2 and name in moved and all(len(n.encode()) <= 255 for n in moved)
    assert not (tmp_path / name).exists()
