"""A real, throw-away S3-compatible server for tests: moto's server mode (``moto[server]`` from PyPI).

``S3Server`` runs ``python -m moto.server`` on a free port on 127.0.0.1 (never on another interface), creates one
IAM user with an access key allowed ``s3:*`` (and whatever else ``actions`` names: ``glue:*`` for moto's AWS Glue
Data Catalog, served on the same endpoint), the buckets asked for, and then turns moto's request authentication
on: from then on every request must be signed with that user's key (a wrong key id or secret is refused, as S3
would refuse it)::

    with S3Server(tmp_path / "s3", buckets=("lake",)) as s3:
        s3.endpoint  # http://127.0.0.1:PORT
        s3.storage_properties()  # pyiceberg FileIO properties: endpoint, access key, secret, region

Moto keeps everything in memory: a restart starts empty. Why moto: an S3 server installable from PyPI here
(no MinIO or Ceph package in the index or Debian's), speaking the S3 protocol over HTTP to pyarrow's AWS SDK client,
with signature checks.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from testbed.ports import find_free_port
from testbed.server_process import LoopbackServer

HOST = "127.0.0.1"
REGION = "us-east-1"
USER = "tiering-lake"
LOG_FILE = "moto.log"
#: Ambient AWS variables a process may inherit; the server itself is started without them.
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)


def wrong_aws_environment() -> dict[str, str]:
    """Ambient AWS variables that point elsewhere: another key, secret, token, region and a dead endpoint."""
    dead = f"http://127.0.0.1:{find_free_port()}"
    return {
        "AWS_ACCESS_KEY_ID": "AKIAAMBIENTWRONG0000",
        "AWS_SECRET_ACCESS_KEY": "ambient-wrong-secret-0000000000000000000",
        "AWS_SESSION_TOKEN": "ambient-wrong-session-token",
        "AWS_ENDPOINT_URL": dead,
        "AWS_ENDPOINT_URL_S3": dead,
        "AWS_REGION": "eu-west-3",
        "AWS_DEFAULT_REGION": "eu-west-3",
    }


class S3ServerError(RuntimeError):
    """moto's server did not start, or refused the setup requests."""


class S3Server(LoopbackServer):
    """moto's S3 server on 127.0.0.1, with one IAM user's key and request authentication on."""

    what = "moto's server"
    error = S3ServerError

    def __init__(
        self,
        directory: Path,
        *,
        buckets: Sequence[str] = ("lake",),
        actions: Sequence[str] = ("s3:*",),
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(Path(directory) / LOG_FILE, start_timeout)
        self.directory = Path(directory)
        self.buckets = tuple(buckets)
        self.actions = tuple(actions)
        self.access_key_id = ""
        self.secret_access_key = ""

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def storage_properties(
        self, *, access_key_id: str | None = None, secret_access_key: str | None = None
    ) -> dict[str, str]:
        """pyiceberg FileIO properties for this server (another key id or secret to test a refused one)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key_id if access_key_id is None else access_key_id,
            "s3.secret-access-key": self.secret_access_key if secret_access_key is None else secret_access_key,
            "s3.region": REGION,
        }

    def client(self, service: str = "s3") -> Any:
        """A boto3 client signed with the user's key (code independent of the package's own S3 access)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key_id or "setup",
            aws_secret_access_key=self.secret_access_key or "setup",
            region_name=REGION,
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` in ``bucket``."""
        found: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", ()))
        return sorted(found)

    # -- life cycle ---------------------------------------------------------------------------------------------
    def start(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in AWS_VARIABLES and k != "INITIAL_NO_AUTH_ACTION_COUNT"}
        self._launch(env)
        self._set_up()
        return self

    def _command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)]

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2):
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _set_up(self) -> None:
        iam = self.client("iam")
        iam.create_user(UserName=USER)
        statement = {"Effect": "Allow", "Action": list(self.actions), "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [statement]}
        iam.put_user_policy(UserName=USER, PolicyName="lake", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        s3 = self.client()
        for bucket in self.buckets:
            s3.create_bucket(Bucket=bucket)
        # From here on every request is authenticated against the IAM user's key and checked by policy.
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=b"0", method="POST")
        request.add_header("Content-Type", "text/plain")  # a form body would be parsed away before moto reads it
        with urllib.request.urlopen(request, timeout=10) as response:
            if json.loads(response.read()).get("status") != "ok":
                raise S3ServerError("moto refused to turn request authentication on")

    def __repr__(self) -> str:
        return f"S3Server({self.endpoint if self.running else 'stopped'})"
