"""Error translation at the integrations' seam (SPEC §6, §10): botocore's exceptions and
Google Drive's error answers, each to its errorCode, permanent or transient. The same
mappings are exercised end to end against real servers in tests/integration."""

from __future__ import annotations

from typing import Any

import pytest
from botocore import exceptions as boto

from daemon.config import Secret
from daemon.errors import PermanentJobError, TransientJobError
from daemon.integrations.base import FileRef
from daemon.integrations.google_drive import drive_error, error_reasons
from daemon.storage.s3 import S3Settings, s3_error

DENIED = "INTEGRATION_ACCESS_DENIED"
NOT_FOUND = "REMOTE_FILE_NOT_FOUND"
SCOPE = "INTEGRATION_PERMISSION_DENIED"
EXPIRED = "INTEGRATION_AUTH_EXPIRED"


def client_error(code: str, status: int) -> boto.ClientError:
    return boto.ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                            "GetObject")


@pytest.mark.parametrize("code, status, expected, transient", [
    ("NoSuchKey", 404, NOT_FOUND, False),
    ("404", 404, NOT_FOUND, False),               # HEAD answers have no body: only the status
    ("NotFound", 404, NOT_FOUND, False),
    ("NoSuchBucket", 404, DENIED, False),         # a wrong bucket is the integration's fault, not a missing file
    ("AccessDenied", 403, DENIED, False),
    ("403", 403, DENIED, False),
    ("InvalidAccessKeyId", 403, DENIED, False),
    ("SignatureDoesNotMatch", 403, DENIED, False),
    ("ExpiredToken", 400, DENIED, False),
    ("AllAccessDisabled", 403, DENIED, False),
    ("PermanentRedirect", 301, DENIED, False),    # the bucket is in another region
    ("301", 301, DENIED, False),
    ("AuthorizationHeaderMalformed", 400, DENIED, False),
    ("IllegalLocationConstraintException", 400, DENIED, False),
    ("SlowDown", 503, "INTERNAL_ERROR", True),
    ("ServiceUnavailable", 503, "INTERNAL_ERROR", True),
    ("InternalError", 500, "INTERNAL_ERROR", True),
    ("RequestTimeout", 400, "INTERNAL_ERROR", True),
    ("Throttling", 400, "INTERNAL_ERROR", True),
    ("SomethingNew", 502, "INTERNAL_ERROR", True),  # unknown, but a 5xx: transient
    ("SomethingNew", 429, "INTERNAL_ERROR", True),
    ("SomethingNew", 403, DENIED, False),
    ("SomethingNew", 404, NOT_FOUND, False),
    ("InvalidObjectState", 400, "INTERNAL_ERROR", False),
])
def test_s3_client_errors(code: str, status: int, expected: str, transient: bool) -> None:
    error = s3_error(client_error(code, status), bucket="b", key="k.pdf")
    assert error.code == expected, error.message
    assert isinstance(error, TransientJobError if transient else PermanentJobError)
    assert "b" in error.message


@pytest.mark.parametrize("exc, expected, transient", [
    (boto.EndpointConnectionError(endpoint_url="http://minio:9000"), "INTERNAL_ERROR", True),
    (boto.ConnectTimeoutError(endpoint_url="http://minio:9000"), "INTERNAL_ERROR", True),
    (boto.ReadTimeoutError(endpoint_url="http://minio:9000"), "INTERNAL_ERROR", True),
    (boto.ConnectionClosedError(endpoint_url="http://minio:9000"), "INTERNAL_ERROR", True),
    (boto.ResponseStreamingError(error="reset"), "INTERNAL_ERROR", True),
    (boto.IncompleteReadError(actual_bytes=1, expected_bytes=2), "INTERNAL_ERROR", True),
    (ConnectionResetError(), "INTERNAL_ERROR", True),
    (boto.NoCredentialsError(), DENIED, False),
    (boto.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), DENIED, False),
    (boto.ParamValidationError(report="Invalid bucket name"), DENIED, False),
    (ValueError("a bug"), "INTERNAL_ERROR", False),
])
def test_s3_library_errors(exc: Exception, expected: str, transient: bool) -> None:
    error = s3_error(exc, bucket="b")
    assert error.code == expected and error.retryable is transient


def test_s3_messages_name_the_object_and_never_a_secret() -> None:
    assert s3_error(client_error("NoSuchKey", 404), bucket="docs", key="a/b.pdf").message == \
        "No object s3://docs/a/b.pdf"
    assert s3_error(client_error("NoSuchBucket", 404), bucket="docs").message == "Bucket docs does not exist"
    assert "region" in s3_error(client_error("PermanentRedirect", 301), bucket="docs").message
    settings = S3Settings(bucket="b", region="r", access_key_id="AKIA", secret_access_key=Secret("shh-secret"))
    assert "shh-secret" not in repr(settings) and "secret_access_key" not in repr(settings)


def test_s3_keys_are_joined_under_the_prefix() -> None:
    settings = S3Settings(bucket="b", region="r", prefix="/inbox/")
    assert settings.object_key("", "a.pdf") == "inbox/a.pdf"
    assert settings.object_key("/2024/march/", "a.pdf") == "inbox/2024/march/a.pdf"
    assert settings.folder_prefix("") == "inbox/" and settings.folder_prefix("2024") == "inbox/2024/"
    bare = S3Settings(bucket="b", region="r")
    assert bare.object_key("", "a.pdf") == "a.pdf" and bare.folder_prefix("") == ""
    assert bare.object_key("x", "dir/a.pdf") == "x/dir/a.pdf"


def google(status: int, reason: str | None = None, *, detail: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": status, "message": "m"}
    if reason:
        error["errors"] = [{"domain": "global", "reason": reason, "message": "m"}]
    if detail:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": detail}]
    return {"error": error}


@pytest.mark.parametrize("status, body, expected, transient", [
    (401, google(401, "authError"), EXPIRED, False),
    (403, google(403, "insufficientPermissions"), SCOPE, False),
    (403, google(403, None, detail="ACCESS_TOKEN_SCOPE_INSUFFICIENT"), SCOPE, False),
    (403, google(403, "forbidden"), SCOPE, False),               # not shared with the account
    (403, google(403, "cannotDownloadAbusiveFile"), SCOPE, False),
    (403, {}, SCOPE, False),
    (403, google(403, "rateLimitExceeded"), "INTERNAL_ERROR", True),   # Google's rate limits are 403s too
    (403, google(403, "userRateLimitExceeded"), "INTERNAL_ERROR", True),
    (403, google(403, None, detail="RATE_LIMIT_EXCEEDED"), "INTERNAL_ERROR", True),
    (403, google(403, "exportSizeLimitExceeded"), "UNSUPPORTED_FILE", False),
    (404, google(404, "notFound"), NOT_FOUND, False),
    (429, google(429, "rateLimitExceeded"), "INTERNAL_ERROR", True),
    (500, google(500, "backendError"), "INTERNAL_ERROR", True),
    (503, {}, "INTERNAL_ERROR", True),
    (400, google(400, "invalid"), "INTERNAL_ERROR", False),
])
def test_drive_errors(status: int, body: dict[str, Any], expected: str, transient: bool) -> None:
    error = drive_error(status, body, "file abc", retry_after_s=3)
    assert error.code == expected, error.message
    assert error.retryable is transient
    if transient:
        assert error.retry_after_s == 3


def test_drive_error_reasons_read_both_formats() -> None:
    assert error_reasons(google(403, "a", detail="B")) == {"a", "B"}
    assert error_reasons({"error": "invalid_grant"}) == set()
    assert error_reasons({}) == set()
    assert drive_error(404, {}, "file abc").message == "Google Drive has no file abc"


def test_file_refs_describe_what_they_name() -> None:
    assert FileRef(file_id="x1").describe() == "file x1"
    assert FileRef(key="a.pdf", folder_path="/Invoices/2024/").describe() == "Invoices/2024/a.pdf"
    ref = FileRef.from_source({"integrationId": "i", "key": "a.pdf", "folderPath": "f"})
    assert ref.source("i") == {"integrationId": "i", "key": "a.pdf", "folderPath": "f"}
