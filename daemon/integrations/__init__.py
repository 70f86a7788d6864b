"""Remote file stores a job can take its file from (SPEC §10): S3-compatible buckets and
Google Drive. `base` is the seam (`RemoteSource`, `FileRef`, the error codes); `s3` and
`google_drive` implement it; `oauth` is the pure half of the OAuth flow; `sources` builds
a live source from a stored integration; `fetch` streams a PENDING job's file into the
blob store for the workers.
"""

from daemon.integrations.base import FileRef, IntegrationStatus, Provider, RemoteEntry, RemoteFile, RemoteSource

__all__ = ["FileRef", "IntegrationStatus", "Provider", "RemoteEntry", "RemoteFile", "RemoteSource"]
