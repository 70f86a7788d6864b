"""The `source` of a job and the `sources` of a batch run (SPEC §6, §10): checked against the
user's integrations and turned into PENDING jobs, S3 prefixes and Drive folders listed
into one job per file. The jobs and the batch-run routes share it.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from daemon.errors import BadRequest, JobError
from daemon.integrations.base import FileRef, IntegrationStatus, Provider, RemoteEntry
from daemon.integrations.s3 import S3Source
from daemon.integrations.sources import open_source
from daemon.services import Services
from daemon.storage.repos import integrations as repo
from daemon.storage.repos.jobs import NewJob


class SourceIn(BaseModel):
    """A remote file (`fileId` | `key`, optionally in `folderPath`), or, in a batch run only,
    a folder to list into one job per file (`folderPath` alone, or an S3 key `prefix`)."""

    model_config = ConfigDict(extra="forbid")

    integrationId: str = Field(min_length=1, max_length=64)
    fileId: str | None = Field(default=None, min_length=1, max_length=256)
    key: str | None = Field(default=None, min_length=1, max_length=1024)
    folderPath: str | None = Field(default=None, max_length=1024)
    prefix: str | None = Field(default=None, max_length=1024)

    @property
    def names_a_file(self) -> bool:
        return self.fileId is not None or self.key is not None


async def job_sources(services: Services, user_id: str, sources: list[SourceIn], *, path: str, allow_listing: bool,
                      limit: int) -> list[NewJob]:
    """The PENDING jobs the sources make, in order: one per file, one per listed file.

    Args:
        user_id: the requesting user; only their integrations may be named.
        path: how the request names the list in messages (``source`` or ``sources``).
        allow_listing: batch runs may list folders; single jobs name one file.
        limit: at most this many jobs in all.

    Raises:
        BadRequest: another user's or an unknown integration, a source that names nothing
            or names it the other provider's way, a listing the store refused (its errorCode
            in ``details``), or more files than `limit`.
    """
    def at(i: int) -> str:
        return path if not allow_listing else f"{path}.{i}"

    owned = await services.db.read(repo.integrations_by_id, user_id, [s.integrationId for s in sources])
    problems: list[str] = []
    for i, source in enumerate(sources):
        row = owned.get(source.integrationId)
        if row is None:
            problems.append(f"{at(i)}.integrationId must be the id of one of your integrations")
            continue
        if source.fileId is not None and source.key is not None:
            problems.append(f"{at(i)} must name its file with fileId or key, not both")
        if not source.names_a_file and not (allow_listing and (source.folderPath is not None or source.prefix)):
            problems.append(f"{at(i)} must name a file with fileId or key"
                            + (", or a folder with folderPath or prefix" if allow_listing else ""))
        if source.prefix is not None and (source.names_a_file or not allow_listing):
            problems.append(f"{at(i)}.prefix lists a folder in a batch run and goes without fileId or key")
        if row.provider == Provider.S3 and source.fileId is not None:
            problems.append(f"{at(i)}.fileId is for google-drive: an S3 object is named with key")
        if row.provider == Provider.GOOGLE_DRIVE and source.prefix is not None:
            problems.append(f"{at(i)}.prefix is for s3: a Google Drive folder is named with folderPath")
        if row.status != IntegrationStatus.CONNECTED:
            problems.append(f"{at(i)}.integrationId: integration {row.id} is {row.status}; "
                            + ("complete the Google consent first" if row.status == "pending_authorization"
                               else "reconnect it first"))
    if problems:
        raise BadRequest(problems)

    jobs: list[NewJob] = []
    for i, source in enumerate(sources):
        row = owned[source.integrationId]
        if source.names_a_file:
            ref = FileRef(key=source.key, file_id=source.fileId, folder_path=source.folderPath)
            name = posixpath.basename(source.key) if source.key else None
            jobs.append(NewJob(file_name=name or None, source=ref.source(row.id)))
        else:
            for entry in await _listing(services, row, source, at(i), limit - len(jobs)):
                jobs.append(NewJob(file_name=entry.name or None, source=entry.ref.source(row.id)))
        if len(jobs) > limit:
            raise BadRequest([f"{path} name more than {limit} files: split them over several runs"])
    return jobs


async def _listing(services: Services, row: Any, source: SourceIn, where: str, limit: int) -> list[RemoteEntry]:
    try:
        async with open_source(services, row) as remote:
            if source.prefix and isinstance(remote, S3Source):
                folder = (source.folderPath or "").strip("/")
                prefix = (folder + "/" if folder else "") + source.prefix.lstrip("/")
                entries = await remote.list_prefix(prefix, limit=max(0, limit))
            else:
                entries = await remote.list(source.folderPath or "", limit=max(0, limit))
    except JobError as exc:
        raise BadRequest([f"{where}: {exc.message}"], details={"errorCode": exc.code}) from exc
    if not entries:
        raise BadRequest([f"{where}: there are no files under {source.folderPath or source.prefix!r}"])
    return entries
