"""The S3 client pieces both the S3 blob store (`daemon.storage.blobs`) and the S3
integration (`daemon.integrations.s3`) use: where a bucket is, a botocore client for it,
and the one translation of botocore's exceptions into SPEC §6 codes (`s3_error`).

boto3 is imported inside `make_client` and `s3_error`, so only a process that uses S3
pays for loading it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon.config import Secret
from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.jobs.models import ErrorCode

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client  # boto3-stubs[s3], a dev dependency

# The SDK logs whole requests at DEBUG, credentials in the Authorization header included:
# whatever docex's own log level, those records never pass.
for _sdk in ("boto3", "botocore", "s3transfer", "urllib3"):
    logging.getLogger(_sdk).setLevel(logging.WARNING)

# botocore retries a throttled or failed call once more itself; the job's own backoff
# (daemon.jobs.retry) does the rest, so a long outage does not hold a worker.
_SDK_MAX_ATTEMPTS = 2
_CONNECT_TIMEOUT_S = 10
_READ_TIMEOUT_S = 60

# Error codes of S3's REST API (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)
# and the bare status codes botocore reports for bodiless answers (HEAD).
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchVersion"})
_NO_BUCKET = frozenset({"NoSuchBucket"})
_WRONG_REGION = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "301",
                           "IllegalLocationConstraintException", "InvalidRegion"})
_DENIED = frozenset({"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                     "AllAccessDisabled", "AccountProblem", "InvalidToken", "ExpiredToken", "InvalidBucketName",
                     "InvalidSecurity", "RequestTimeTooSkewed", "MissingSecurityHeader", "UnauthorizedAccess"})
_TRANSIENT = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded",
                        "InternalError", "ServiceUnavailable", "503", "500", "502", "504", "TooManyRequests",
                        "OperationAborted"})


@dataclass(frozen=True)
class S3Settings:
    """Where and as whom to reach a bucket. The secret never shows in a repr."""

    bucket: str
    region: str
    access_key_id: str = ""
    secret_access_key: Secret | None = field(default=None, repr=False)
    endpoint_url: str | None = None
    prefix: str = ""

    def object_key(self, *parts: str) -> str:
        """`parts` joined under the prefix: folders lose their outer slashes, the last part is kept."""
        *folders, last = parts
        segments = [p.strip("/") for p in (self.prefix, *folders) if p and p.strip("/")]
        return "/".join([*segments, last]) if segments else last

    def folder_prefix(self, folder: str) -> str:
        """The key prefix of a folder under the integration's prefix (``a/b/``; empty: everything)."""
        segments = [p.strip("/") for p in (self.prefix, folder) if p and p.strip("/")]
        return "/".join(segments) + "/" if segments else ""


def make_client(settings: S3Settings, *, no_proxies: bool = False) -> S3Client:
    """A botocore S3 client (blocking to build: call it in a thread).

    Path-style addressing with a custom endpoint (what MinIO and most compatibles want).
    An empty access key id means boto3's own credential chain. `no_proxies`: no proxy from
    the environment connects on the client's behalf (the S3 integration's SSRF guard).
    """
    import boto3
    from botocore.config import Config as BotoConfig

    config = BotoConfig(
        region_name=settings.region,
        signature_version="s3v4",
        connect_timeout=_CONNECT_TIMEOUT_S,
        read_timeout=_READ_TIMEOUT_S,
        retries={"max_attempts": _SDK_MAX_ATTEMPTS, "mode": "standard"},
        s3={"addressing_style": "path" if settings.endpoint_url else "auto"},
        # Checksums only where S3 requires them: what S3-compatible servers (older MinIO, Ceph)
        # expect, as AWS itself recommends for third-party stores.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        proxies={} if no_proxies else None,
    )
    key_id: str | None = None
    secret: str | None = None
    if settings.access_key_id and settings.secret_access_key is not None:
        key_id, secret = settings.access_key_id, settings.secret_access_key.reveal()
    return boto3.session.Session().client("s3", endpoint_url=settings.endpoint_url or None, config=config,
                                          aws_access_key_id=key_id, aws_secret_access_key=secret)


def s3_error(exc: BaseException, *, bucket: str, key: str | None = None) -> JobError:
    """The SPEC §6 error for a botocore exception about `bucket` (and `key`).

    Most specific first: a missing bucket is an access problem, not a missing file; a
    wrong region is told apart from wrong credentials; throttling, 5xx and network
    failures are transient. Anything else is a permanent INTERNAL_ERROR naming S3's code.
    """
    from botocore import exceptions as boto

    where = f"s3://{bucket}/{key}" if key is not None else f"bucket {bucket}"
    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _NO_BUCKET:
            return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED, f"Bucket {bucket} does not exist")
        if code in _NOT_FOUND:
            return PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, f"No object {where}")
        if code in _WRONG_REGION:
            return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED,
                                     f"Bucket {bucket} is in another region than the one configured ({code})")
        if code in _DENIED:
            return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED,
                                     f"S3 refused access to {where} ({code}): check the access key, secret and bucket")
        if code in _TRANSIENT or status == 429 or status >= 500:
            return TransientJobError(ErrorCode.INTERNAL_ERROR, f"S3 is unavailable for {where} ({code or status})")
        if status == 403:
            return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED, f"S3 refused access to {where} ({code})")
        if status == 404:
            return PermanentJobError(ErrorCode.REMOTE_FILE_NOT_FOUND, f"No object {where} ({code})")
        return PermanentJobError(ErrorCode.INTERNAL_ERROR, f"S3 answered {code or status} for {where}")
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED, "No S3 credentials are configured")
    if isinstance(exc, boto.ParamValidationError):
        return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED, f"Invalid S3 request for {where}: {exc}")
    if isinstance(exc, boto.ConnectionError | boto.HTTPClientError | boto.IncompleteReadError | OSError):
        # As `daemon.integrations.base.unreachable` says it for every remote store.
        return TransientJobError(ErrorCode.INTERNAL_ERROR, f"Cannot reach S3 for {where} ({type(exc).__name__})")
    return PermanentJobError(ErrorCode.INTERNAL_ERROR, f"S3 request for {where} failed ({type(exc).__name__})")
