"""Local folders of inboxes: where a folder may be, what is in it, copying a file into the
blob store, and moving it aside once its job ended.

A folder is `inboxes.local_root` joined with the path an admin gave; it must resolve,
symlinks followed, inside the root (`resolve_folder`), at creation and again at every
sweep (a symlink swapped since must not lead out). Inside the folder only regular files
are taken: symlinks, sub-folders (done/, failed/ among them) and dot-files are not.

A sweep works through the folder's descriptor (`open_folder`), never its path again: the
folder was opened component by component without following a symlink, so one swapped in
for it or for done/ after the check (a race an attacker who can write in the folder's
parent can win) leads nowhere: reads and moves stay in the folder that was checked.

Blocking functions say so: run them with `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import trio

from daemon.inboxes.models import DONE_DIR, FAILED_DIR, Candidate, identity
from daemon.jobs import filetypes
from daemon.storage.blobs import CHUNK_BYTES, BlobStore
from daemon.storage.repos.jobs import NewJob

log = logging.getLogger(__name__)

ACCEPTED = "PDF, PNG, JPEG, TIFF, WEBP, DOCX, XLSX, CSV, TXT, HTML"


class PathRefused(ValueError):
    """A folder path that is not a folder under the root; the message says why."""


def path_problems(relative: str) -> list[str]:
    """What is wrong with `relative` as written (pure): empty, NUL bytes, lone surrogates,
    absolute, `..`."""
    if not relative.strip():
        return ["path should not be empty"]
    if "\0" in relative:
        return ["path must not contain NUL bytes"]
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from JSON's \ud800: no file name has one
        return ["path must be valid Unicode text"]
    if relative.startswith(("/", "\\")) or os.path.isabs(relative):
        return ["path must be relative to inboxes.local_root, not absolute"]
    if ".." in relative.replace("\\", "/").split("/"):
        return ["path must not contain '..'"]
    return []


def resolve_folder(root: str, relative: str) -> Path:
    """The folder `relative` names under `root`, symlinks resolved (blocking).

    Raises:
        PathRefused: no root configured, a bad path, a folder that resolves outside the
            root (through a symlink), or that is not an existing folder.
    """
    if not root:
        raise PathRefused("local folders are disabled on this server (inboxes.local_root is empty)")
    problems = path_problems(relative)
    if problems:
        raise PathRefused(problems[0])
    real_root = os.path.realpath(root)
    folder = os.path.realpath(os.path.join(real_root, relative))
    if folder == real_root or os.path.commonpath([real_root, folder]) != real_root:
        raise PathRefused("path must name a folder inside inboxes.local_root")
    if not os.path.isdir(folder):
        raise PathRefused(f"path {relative!r} is not an existing folder under inboxes.local_root")
    return Path(folder)


def one_spelling(relative: str) -> str:
    """The path as an inbox keeps it: "scans/./" and "scans//" are "scans"."""
    return os.path.normpath(relative)


def watched_elsewhere(root: str, folder: Path, paths: list[str]) -> bool:
    """Whether one of the inboxes' `paths` names `folder`, or one whose files move into it or
    out of it into `folder` (done/, failed/), symlinks resolved, blocking: two inboxes on one
    folder made each file a job twice, and an admin's inbox on another admin's folder copied
    that admin's documents into their own account."""
    for path in paths:
        try:
            other = resolve_folder(root, path)
        except PathRefused:
            continue  # a folder gone or moved since: its inbox reports it on its sweep
        if other == folder or _set_aside_in(folder, other) or _set_aside_in(other, folder):
            return True
    return False


def _set_aside_in(folder: Path, watched: Path) -> bool:
    """Whether `folder` is where the inbox of `watched` moves its files once done."""
    return folder.parent == watched and folder.name in (DONE_DIR, FAILED_DIR)


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Folder:
    """An inbox's folder opened (`open_folder`): listed, read and moved through its
    descriptor. Close it (a context manager) when the pass is over."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_folder(root: str, relative: str) -> Folder:
    """`resolve_folder`, then that folder opened from "/" one component at a time, following
    no symlink (blocking): the resolved path has none, so one found now was swapped in since.

    Raises:
        PathRefused: as `resolve_folder`, or a component of the folder replaced meanwhile.
    """
    folder = resolve_folder(root, relative)
    fd = os.open("/", _DIRECTORY_FLAGS)
    try:
        for part in folder.parts[1:]:
            inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as exc:
        os.close(fd)
        raise PathRefused(f"path {relative!r} changed while it was opened (a symlink put in a folder's place?)") \
            from exc
    return Folder(fd, folder)


# A modification time this far ahead of the clock is not a file being written now (a clock
# ahead, or a time set by `touch -d`, `cp -p`, `rsync -t`): it is taken as settled. Waiting
# for it held the file for ever, and a time past year 9999 ended the daemon.
_FUTURE_S = 60.0


@dataclass(frozen=True)
class Scan:
    candidates: list[Candidate]
    # The earliest time (time.time()) a file still being written will have settled: sweep again then.
    settles_at: float | None


def scan(folder: Folder, *, settle_s: float, now: float) -> Scan:
    """The settled regular files directly in `folder`, oldest first (blocking)."""
    found: list[tuple[int, Candidate]] = []
    settles_at: float | None = None
    with os.scandir(folder.fd) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if not _is_text(entry.name):
                # Linux names are bytes; one that is not UTF-8 (a Latin-1 scanner, an SMB share)
                # comes with lone surrogates, which no identity, job name or event can hold: it
                # stopped every sweep of the folder, its other files included.
                log.warning("skipping a file whose name is not UTF-8: %s (rename it)",
                            entry.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                            extra={"action": "inbox.name_not_utf8"})
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # moved away since the listing
            if not stat.S_ISREG(info.st_mode):
                continue
            settled = info.st_mtime + settle_s
            if now < settled and info.st_mtime <= now + _FUTURE_S:
                settles_at = settled if settles_at is None else min(settles_at, settled)
                continue
            found.append((info.st_mtime_ns, Candidate(
                identity=identity("local", entry.name, info.st_size, info.st_mtime_ns),
                name=entry.name, size=info.st_size, local_path=str(folder.path / entry.name))))
    found.sort(key=lambda pair: (pair[0], pair[1].name))
    return Scan([candidate for _, candidate in found], settles_at)


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Refused(Exception):
    """A file that cannot become a job (too large, unsupported type); the message says why."""


class Changed(Exception):
    """The file changed or went away between the listing and the copy: the next sweep sees it anew."""


async def copy_in(blobs: BlobStore, folder: Folder, candidate: Candidate, max_bytes: int) -> NewJob:
    """Copy a local file into the blob store, hashed, counted and typed from its bytes, as
    an upload is (`daemon.jobs.upload`).

    Raises:
        Refused: over `max_bytes`, or of an unsupported type (no blob is left).
        Changed: the file is not the one listed (its size or mtime moved, or it is gone).
    """
    if candidate.size is not None and candidate.size > max_bytes:
        raise Refused(f"File too large: {candidate.name} is {candidate.size} bytes, over the maximum of "
                      f"{max_bytes} bytes (MAX_FILE_SIZE)")
    try:
        handle = trio.wrap_file(await trio.to_thread.run_sync(_open_regular, folder, candidate.name))
    except PermissionError as exc:
        # Not for docex to read: refused (failed/, the run's event say so). Taken as changed,
        # it was tried again every half second for ever, with nothing said anywhere.
        raise Refused(f"Cannot read {candidate.name}: permission denied (docex runs as a user who may not "
                      "read it)") from exc
    except OSError as exc:  # gone, or a symlink now (ELOOP), or no longer a regular file
        raise Changed(candidate.name) from exc
    writer = await blobs.open_writer()
    size, hasher, head = 0, hashlib.sha256(), bytearray()
    try:
        async with handle:
            while chunk := await handle.read(CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise Changed(candidate.name)  # it grew past the limit since it was listed
                if len(head) < filetypes.SNIFF_BYTES:
                    head += chunk[: filetypes.SNIFF_BYTES - len(head)]
                hasher.update(chunk)
                await writer.write(chunk)
            info = await trio.to_thread.run_sync(os.fstat, handle.fileno())
            if identity("local", candidate.name, info.st_size, info.st_mtime_ns) != candidate.identity or \
                    size != info.st_size:
                raise Changed(candidate.name)
            mime = filetypes.sniff(bytes(head))
            if mime == filetypes.ZIP:  # from the file copied, not whatever has its name by now
                mime = await trio.to_thread.run_sync(filetypes.refine_zip, handle.wrapped, bytes(head))
        if mime not in filetypes.SUPPORTED:
            raise Refused(f"Unsupported file type: {candidate.name} (accepted: {ACCEPTED})")
        await writer.commit()
    except BaseException:
        with trio.CancelScope(shield=True):
            await writer.abort()
        raise
    return NewJob(file_name=candidate.name, file_size=size, mime_type=mime, sha256=hasher.hexdigest(),
                  blob_key=writer.key)


def _open_regular(folder: Folder, name: str) -> io.BufferedReader:
    """`name` in `folder` opened for reading if it is still a regular file (blocking). The name was listed
    as one, but may have been replaced since: a symlink must not be followed (it would hand
    in any file the daemon can read), nor a FIFO opened (the open would wait for a writer
    for ever, in a thread no cancellation reaches).

    Raises:
        OSError: gone, a symlink (ELOOP), or not a regular file.
    """
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=folder.fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{name} is no longer a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def move_beside(folder: Folder, name: str, subfolder: str, tag: str, taken: str) -> None:
    """Move `name` into `subfolder/` of `folder` (blocking), if it is still the file taken
    (its identity `taken`): a new file written under the same name since is the next
    sweep's, not done. A name already there gets `tag` added; a file already gone (another
    process moved it, a person took it) is fine.

    Raises:
        NotADirectoryError: `subfolder` is a file or a symlink, not the folder docex made (a
            symlink done -> /elsewhere would carry files out of inboxes.local_root).
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(subfolder, dir_fd=folder.fd)
    try:
        target_dir = os.open(subfolder, _DIRECTORY_FLAGS, dir_fd=folder.fd)
    except OSError as exc:
        raise NotADirectoryError(f"cannot move {name} into {subfolder}/: {subfolder} in the inbox's folder "
                                 "is not a folder (a file or a symlink has its name)") from exc
    try:
        try:
            info = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if identity("local", name, info.st_size, info.st_mtime_ns) != taken:
            return
        target = name
        if _exists(target, target_dir):
            stem, dot, suffix = name.rpartition(".")
            if not (dot and stem):
                stem, suffix = name, ""
            # Shortened to fit a file name's 255 bytes with the tag: a long name taken twice
            # could never be moved ("File name too long"), and said so at every pass.
            room = 255 - len(f"-{tag}.{suffix}".encode()) if suffix else 255 - len(f"-{tag}".encode())
            stem = stem.encode()[:room].decode(errors="ignore")
            target = f"{stem}-{tag}.{suffix}" if suffix else f"{stem}-{tag}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(name, target, src_dir_fd=folder.fd, dst_dir_fd=target_dir)
    finally:
        os.close(target_dir)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
