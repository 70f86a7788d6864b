"""A real S3-protocol server on loopback for the tests: moto's standalone server
(``python -m moto.server``, from ``moto[server]``) in a subprocess.

One server serves the whole test session (`S3Server.start`, from the `s3_server`
fixture in tests/conftest.py). Authentication is switched on once the fixture has
made its IAM users, so S3 checks keys, signatures and policies like AWS does:

- `admin`: an access key allowed ``s3:*`` (the tests' normal credentials);
- `denied`: a valid access key with no policy at all (AccessDenied on everything);
- anything else: an unknown access key (InvalidAccessKeyId).

Tests isolate themselves with a bucket each (`S3Server.new_bucket`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx

STARTUP_TIMEOUT_S = 30.0
REGION = "us-east-1"


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Exited(RuntimeError):
    """The server process ended before it answered (its port was taken, say)."""


class S3Server:
    """A running moto server with its IAM users made and authentication on."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self.admin = Credentials("", "")
        self.denied = Credentials("", "")

    @classmethod
    def start(cls) -> S3Server:
        # The port is found free, then bound by the server a second or two later: should
        # something take it meanwhile, the server exits, and another port is tried.
        for attempt in range(3):
            port = _free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            server = cls(proc, port)
            try:
                server._wait_ready()
                server._make_users()
            except _Exited:
                if attempt == 2:
                    raise
                continue
            except BaseException:
                server.stop()
                raise
            return server
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise _Exited(f"moto server exited with {self.proc.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.endpoint_url}/moto-api/", timeout=1.0).status_code < 500:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("moto server did not start")
            time.sleep(0.1)

    def _make_users(self) -> None:
        iam = self.client("iam", Credentials("bootstrap", "bootstrap"))
        for name in ("admin", "denied"):
            iam.create_user(UserName=name)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            setattr(self, name, Credentials(key["AccessKeyId"], key["SecretAccessKey"]))
        iam.put_user_policy(UserName="admin", PolicyName="all-s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}],
        }))
        # From now on every request must be signed by a known key allowed to do what it asks.
        httpx.post(f"{self.endpoint_url}/moto-api/reset-auth", content=b"0", timeout=5.0).raise_for_status()

    def client(self, service: str = "s3", credentials: Credentials | None = None) -> Any:
        import boto3

        creds = credentials or self.admin
        return boto3.session.Session().client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=creds.access_key_id,
            aws_secret_access_key=creds.secret_access_key,
        )

    def new_bucket(self, objects: dict[str, bytes] | None = None) -> str:
        """A fresh bucket (random name), holding `objects` by key."""
        name = f"docex-test-{secrets.token_hex(6)}"
        s3 = self.client()
        s3.create_bucket(Bucket=name)
        for key, data in (objects or {}).items():
            s3.put_object(Bucket=name, Key=key, Body=data)
        return name

    def keys(self, bucket: str) -> list[str]:
        s3 = self.client()
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def uploads_in_progress(self, bucket: str) -> list[str]:
        return [u["Key"] for u in self.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
