"""Real object-store servers for the remote-logdir tests, on 127.0.0.1 and a free port.

* :func:`s3_server` starts moto's standalone server (``python -m moto.server``). By
  default it accepts any credentials (as S3-compatible dev servers do); the test makes up
  a random key pair and uses it as users do, so output can be searched for the secret.
  With ``auth=True`` its first actions create an IAM user with an S3 policy and an access
  key, and every later request must carry that key: an unknown key id is refused with
  ``InvalidAccessKeyId`` and a wrong signature with ``SignatureDoesNotMatch``, as S3
  refuses them. (moto 5.2 also refuses correctly signed listings whose query holds a
  ``/``, which every S3 client sends, so only the refusals are tested that way.)
* :func:`gcs_server` starts ``gcp-storage-emulator`` (in-memory).

Both yield a small handle with the endpoint, the settings a client needs (as environment
variables, the way users set them) and helpers to put objects. Every server runs in its own
process group and is stopped afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from support.tbserver import free_port, stop_group

REGION = "us-east-1"
_S3_POLICY = json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}],
})
# Variables that would point a client somewhere else than the test server.
_FOREIGN = (
    "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "S3_ENDPOINT", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
)


def clean_env(**extra) -> dict:
    """os.environ without any cloud settings (no config files, no metadata server), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN and not k.startswith("AWS_")}
    home = tempfile.mkdtemp(prefix="objstore-home-")
    env.update(
        AWS_CONFIG_FILE=os.path.join(home, "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=os.path.join(home, "aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",  # never probe 169.254.169.254 for credentials
        NO_GCE_CHECK="true",
        CLOUDSDK_CONFIG=os.path.join(home, "gcloud"),
        AWS_DEFAULT_REGION=REGION,
        NO_PROXY="127.0.0.1,localhost",
    )
    env.update(extra)
    return env


@contextlib.contextmanager
def _process(cmd, ready, env, name, timeout=60.0):
    log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.time() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; see {log.name}")
            if time.time() > deadline:
                raise RuntimeError(f"{name} was not ready in {timeout:.0f} s; see {log.name}")
            time.sleep(0.2)
        yield proc
    finally:
        stop_group(proc, timeout=10)
        log.close()


def _answers(url) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            r.read()
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


@dataclasses.dataclass
class S3Server:
    endpoint: str
    key_id: str
    secret: str
    process: subprocess.Popen

    def env(self, **extra) -> dict:
        """Client settings as users set them: the standard AWS variables."""
        return clean_env(
            AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=self.key_id,
            AWS_SECRET_ACCESS_KEY=self.secret, **extra,
        )

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret,
        )

    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def upload_tree(self, local_dir, bucket: str, prefix: str) -> int:
        """Copies every file under `local_dir` to s3://bucket/prefix/...; returns the count."""
        c = self.client()
        n = 0
        for root, _, files in os.walk(local_dir):
            for f in sorted(files):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                with open(path, "rb") as fh:
                    c.put_object(Bucket=bucket, Key=f"{prefix}/{rel}" if prefix else rel, Body=fh.read())
                n += 1
        return n


@contextlib.contextmanager
def s3_server(auth: bool = False):
    """moto's S3 server (see module doc)."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    extra = {"AWS_ACCESS_KEY_ID": "setup", "AWS_SECRET_ACCESS_KEY": "setup"}
    if auth:
        # Actions before enforcement: the readiness probe, create_user, put_user_policy, create_access_key.
        extra["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _process(cmd, lambda: _answers(f"{endpoint}/moto-api/"), clean_env(**extra), "moto-s3") as proc:
        if auth:
            iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION,
                               aws_access_key_id="setup", aws_secret_access_key="setup")
            iam.create_user(UserName="tb")
            iam.put_user_policy(UserName="tb", PolicyName="s3", PolicyDocument=_S3_POLICY)
            key = iam.create_access_key(UserName="tb")["AccessKey"]
            key_id, secret = key["AccessKeyId"], key["SecretAccessKey"]
        else:
            key_id = "AKIA" + secrets.token_hex(8).upper()
            secret = secrets.token_urlsafe(30)
        yield S3Server(endpoint, key_id, secret, proc)


@dataclasses.dataclass
class GCSServer:
    endpoint: str
    process: subprocess.Popen

    def env(self, **extra) -> dict:
        """Client settings as users set them for an emulator: STORAGE_EMULATOR_HOST."""
        return clean_env(STORAGE_EMULATOR_HOST=self.endpoint, **extra)

    def _request(self, method, url, data=None, content_type=None):
        req = urllib.request.Request(url, data=data, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def create_bucket(self, bucket: str) -> None:
        self._request("POST", f"{self.endpoint}/storage/v1/b?project=test",
                      json.dumps({"name": bucket}).encode(), "application/json")

    def put(self, bucket: str, key: str, data: bytes) -> None:
        name = urllib.parse.quote(key, safe="")
        self._request("POST", f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
                      data, "application/octet-stream")

    def upload_tree(self, local_dir, bucket: str, prefix: str) -> int:
        n = 0
        for root, _, files in os.walk(local_dir):
            for f in sorted(files):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                with open(path, "rb") as fh:
                    self.put(bucket, f"{prefix}/{rel}" if prefix else rel, fh.read())
                n += 1
        return n


@contextlib.contextmanager
def gcs_server():
    """gcp-storage-emulator, in memory, on 127.0.0.1."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
           "--in-memory", "--quiet"]
    with _process(cmd, lambda: _answers(f"{endpoint}/storage/v1/b?project=test"), clean_env(), "gcs-emulator") as p:
        yield GCSServer(endpoint, p)
