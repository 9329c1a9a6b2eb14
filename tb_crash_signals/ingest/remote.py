"""Event files in object storage (``s3://``, ``gs://``, ``az://``, ``hdfs://``...) through fsspec.

`FsspecStorage` is a `storage.Storage` rooted at one URL. It lists everything under the
root with one recursive listing (S3: ListObjectsV2 pages of 1000 keys, not one request
per run) and answers every question about directories and sizes from that listing until
it is `listing_interval` seconds old; bytes are fetched as ranges (``cat_file(start,
end)``), so a reader that remembers its offsets fetches only what was appended.

Settings come from where users already put them:

* S3 (s3fs): the standard AWS variables and files (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_REGION``,
  ``AWS_ENDPOINT_URL``: botocore reads them); TensorBoard's own ``S3_ENDPOINT`` (its
  boto3 loader's setting) becomes the endpoint when no ``AWS_ENDPOINT_URL`` is set.
* GCS (gcsfs): Google's application-default credentials; ``STORAGE_EMULATOR_HOST``
  selects an emulator (anonymous, as Google's clients do).
* anything else: the fsspec backend's own defaults.

Every failure becomes a `StorageError` whose message names the location (redacted), the
backend and the setting to look at, never a secret.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import math
import os
import re
import threading
import time

from tb_crash_signals.ingest.redact import redact
from tb_crash_signals.ingest.storage import Storage, StorageError, is_event_file

__all__ = ["FsspecStorage", "BACKENDS"]

#: protocol -> (the fsspec backend package, the tb-crash-signals extra that installs it).
BACKENDS = {
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", None), "abfs": ("adlfs", None), "abfss": ("adlfs", None), "adl": ("adlfs", None),
    "hdfs": ("pyarrow", None), "webhdfs": ("fsspec", None),
}

#: bytes fetched ahead of the reader (`FsspecStorage.prefetch`) at most: what a scan may
#: hold beyond the run it is reading.
PREFETCH_BYTES = 32 << 20

_AWS_CREDENTIALS = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or run where an instance role applies)"
)
_GOOGLE_CREDENTIALS = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file or run "
    "`gcloud auth application-default login` (STORAGE_EMULATOR_HOST for an emulator)"
)
_REFUSED_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefreshRequired",
    "InvalidClientTokenId", "AuthFailure", "AuthorizationHeaderMalformed", "UnrecognizedClientException",
}


class _Listing:
    """One recursive listing of the root: relative directory -> {event file name: size}."""

    __slots__ = ("time", "dirs", "anything")

    def __init__(self, when, dirs, anything):
        self.time, self.dirs, self.anything = when, dirs, anything


class FsspecStorage(Storage):
    """A storage over one fsspec URL (see module docstring).

    Args:
        url: the root (a TensorBoard logdir such as ``s3://bucket/logs``).
        listing_interval: seconds a listing is used before the root is listed again
            (``math.inf``: list once).

    Attributes:
        counters: ``listings``, ``reads`` and ``bytes_requested`` (bytes asked for in
            ranged reads, prefetched or not), ``prefetched`` (reads answered by a
            prefetch) since this object was made or unpickled.
    """

    remote = True

    def __init__(self, url: str, listing_interval: float = 5.0):
        if "://" not in url:
            raise ValueError(f"not a URL: {url!r}")
        self.protocol = url.split("://", 1)[0].lower()
        self.url = url.rstrip("/") if not url.endswith("://") else url
        self.listing_interval = listing_interval if listing_interval > 0 else math.inf
        self._listing: _Listing | None = None
        self._fixed = False  # a seeded listing (see `subset`): never listed again
        self._init_runtime()

    def _init_runtime(self):
        self._fs = None
        self._root = None
        self._lock = threading.Lock()
        self._error: StorageError | None = None
        self._failed: tuple[float, StorageError] | None = None  # the last failed listing
        self.counters = {"listings": 0, "reads": 0, "bytes_requested": 0, "prefetched": 0}
        self._ahead: dict[tuple, concurrent.futures.Future] = {}  # prefetched ranges not yet read
        self._ahead_bytes = 0

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_fs", "_root", "_lock", "_error", "_failed", "counters", "_ahead", "_ahead_bytes")}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self):
        return f"FsspecStorage({redact(self.url)!r})"

    # -- the filesystem -----------------------------------------------------

    def filesystem(self):
        """The fsspec filesystem and the root's path in it (made on first use)."""
        if self._fs is None:
            try:
                fs = _shared_filesystem(self.protocol)
                root = fs._strip_protocol(self.url)
            except Exception as e:
                raise translate(e, self.url, self.protocol) from None
            self._fs, self._root = fs, root.rstrip("/")
        return self._fs, self._root

    def _rel(self, url: str) -> str | None:
        """`url` relative to the root ("." for the root), or None if it is not under it."""
        url = url.rstrip("/")
        if url == self.url:
            return "."
        if url.startswith(self.url + "/"):
            return url[len(self.url) + 1:]
        return None

    def _internal(self, url: str) -> str:
        fs, root = self.filesystem()
        rel = self._rel(url)
        if rel is None:
            return fs._strip_protocol(url)
        return root if rel == "." else f"{root}/{rel}"

    # -- listing ------------------------------------------------------------

    def listing(self) -> _Listing:
        """The root's listing, listed again once it is `listing_interval` seconds old."""
        with self._lock:
            now = time.monotonic()
            cur = self._listing
            if cur is not None and (self._fixed or now - cur.time < self.listing_interval):
                return cur
            # A failure stands for an interval too: every run of a logdir asks, and
            # a storage without credentials must not be asked once per run.
            if self._failed is not None and now - self._failed[0] < self.listing_interval:
                raise self._failed[1]
            try:
                fs, root = self.filesystem()
                found = fs.find(root, detail=True)
            except Exception as e:
                err = translate(e, self.url, self.protocol)
                self._error = err if err.fatal else None
                self._failed = (now, err)
                raise err from None
            self.counters["listings"] += 1
            self._error = None
            self._failed = None
            dirs: dict[str, dict[str, int]] = {}
            for path, info in found.items():
                path = path.rstrip("/")
                if not path.startswith(root + "/") and path != root:
                    continue
                if info.get("type", "file") != "file":
                    continue
                rel = path[len(root) + 1:] if path != root else ""
                directory, _, name = rel.rpartition("/")
                if is_event_file(name):
                    dirs.setdefault(directory or ".", {})[name] = int(info.get("size") or 0)
            self._listing = _Listing(now, dirs, bool(found))
            return self._listing

    def subset(self, runs) -> "FsspecStorage":
        """A copy whose listing holds only `runs` (relative names) and is never refreshed:
        what a worker reading those runs needs, without listing the root again."""
        cur = self.listing()
        out = FsspecStorage.__new__(FsspecStorage)
        out.__setstate__({k: v for k, v in self.__getstate__().items() if k != "_listing"})
        out._listing = _Listing(cur.time, {r: dict(cur.dirs[r]) for r in runs if r in cur.dirs}, cur.anything)
        out._fixed = True
        return out

    def portable(self, directories) -> "FsspecStorage":
        rels = [self._rel(d) for d in directories]
        return self.subset([r for r in rels if r is not None])

    def error(self) -> StorageError | None:
        """The fatal error of the last listing (listing the root now if it never was)."""
        if self._listing is None and self._failed is None:
            try:
                self.listing()
            except StorageError:
                pass
        return self._error

    def has_run(self, path: str) -> bool:
        """Whether `path` holds event files as of the listing (False if it cannot be listed)."""
        rel = self._rel(path)
        if rel is None:
            return False
        try:
            return rel in self.listing().dirs
        except StorageError:
            return False

    # -- Storage ------------------------------------------------------------

    def normpath(self, path) -> str:
        return str(path).rstrip("/")

    def isdir(self, path: str) -> bool:
        rel = self._rel(path)
        if rel is None:
            return False
        listing = self.listing()
        if rel == ".":
            if listing.anything:
                return True
            try:  # an empty bucket (or a directory marker) is still a logdir
                fs, root = self.filesystem()
                return bool(fs.isdir(root))
            except Exception:
                return False
        return any(d == rel or d.startswith(rel + "/") for d in listing.dirs)

    def run_dirs(self, root: str) -> list[str]:
        base = self._rel(root)
        if base is None:
            return []
        dirs = self.listing().dirs
        if base == ".":
            return sorted(dirs)
        out = []
        for d in dirs:
            if d == base:
                out.append(".")
            elif d.startswith(base + "/"):
                out.append(d[len(base) + 1:])
        return sorted(out)

    def event_files(self, directory: str) -> list[str]:
        rel = self._rel(directory)
        if rel is None:
            raise StorageError(f"{redact(directory)}: not under {redact(self.url)}", "io")
        return sorted(self.listing().dirs.get(rel, {}))

    def size(self, path: str) -> int:
        directory, _, name = path.rstrip("/").rpartition("/")
        rel = self._rel(directory)
        if rel is not None:
            files = self.listing().dirs.get(rel, {})
            if name in files:
                return files[name]
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        try:
            fs, _ = self.filesystem()
            return int(fs.size(self._internal(path)))
        except Exception as e:
            raise translate(e, path, self.protocol) from None

    def read(self, path: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        key = (path, offset, length)
        with self._lock:
            ahead = self._ahead.pop(key, None)
            if ahead is None and self._ahead:
                # The same file asked for another range (its listing changed since the
                # prefetch): what was fetched for it is stale.
                for stale in [k for k in self._ahead if k[0] == path]:
                    self._ahead.pop(stale).cancel()
                    self._ahead_bytes -= stale[2]
            elif ahead is not None:
                self._ahead_bytes -= length
                self.counters["prefetched"] += 1
        if ahead is None:
            return self._fetch(path, offset, length)
        try:
            return bytes(ahead.result())
        except Exception as e:
            raise translate(e, path, self.protocol) from None

    def _fetch(self, path: str, offset: int, length: int) -> bytes:
        try:
            fs, _ = self.filesystem()
            data = fs.cat_file(self._internal(path), start=offset, end=offset + length)
        except Exception as e:
            raise translate(e, path, self.protocol) from None
        self._count(length)
        return bytes(data)

    def _count(self, length: int) -> None:
        with self._lock:
            self.counters["reads"] += 1
            self.counters["bytes_requested"] += length

    def prefetch(self, requests) -> None:
        """Starts the ranged GETs of `requests` on the backend's event loop (fsspec's
        async backends: s3fs, gcsfs, adlfs), at most PREFETCH_BYTES ahead of `read`.

        A scan reads one run after another, and each GET's latency (tens of ms over a
        network, more from a busy server) would otherwise be waited for in turn. Backends
        without an event loop are read as before: their thread safety is unknown.
        """
        try:
            fs, _ = self.filesystem()
        except StorageError:
            return  # `read` reports it
        loop = getattr(fs, "loop", None) if getattr(fs, "async_impl", False) else None
        if loop is None:
            return
        for path, offset, length in requests:
            if length <= 0:
                continue
            key = (path, offset, length)
            with self._lock:
                if key in self._ahead:
                    continue
                if self._ahead_bytes + length > PREFETCH_BYTES:
                    return
                self._ahead_bytes += length
                coro = fs._cat_file(self._internal(path), start=offset, end=offset + length)
                self._ahead[key] = asyncio.run_coroutine_threadsafe(coro, loop)
                self.counters["reads"] += 1
                self.counters["bytes_requested"] += length

    def join(self, directory: str, name: str) -> str:
        return f"{directory.rstrip('/')}/{name}"

    def run_path(self, root: str, run: str) -> str:
        return root.rstrip("/") if run == "." else f"{root.rstrip('/')}/{run}"

    def signature(self, directory: str):
        """(name, size) of the directory's event files, from the listing."""
        rel = self._rel(directory)
        try:
            files = self.listing().dirs.get(rel, {}) if rel is not None else {}
        except StorageError as e:
            return ("error", str(e))
        return tuple(sorted(files.items()))

    def read_small(self, path: str, limit: int) -> bytes | None:
        """The whole of a small file (None if it does not exist; StorageError if larger
        than `limit` or unreadable): the config file at the root."""
        try:
            fs, _ = self.filesystem()
            internal = self._internal(path)
            if not fs.exists(internal):
                return None
            if int(fs.size(internal)) > limit:
                raise StorageError(f"{redact(path)}: larger than {limit} bytes", "io")
            return bytes(fs.cat_file(internal))
        except StorageError:
            raise
        except Exception as e:
            raise translate(e, path, self.protocol) from None


# -- backends ------------------------------------------------------------------


def s3_endpoint() -> str | None:
    """The endpoint for S3 when TensorBoard's ``S3_ENDPOINT`` is what is set.

    botocore reads ``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3`` itself; those win.
    TensorBoard hands ``S3_ENDPOINT`` to boto3 as is; a bare ``host:port`` gets the
    scheme TensorFlow's S3 client would use (``S3_USE_HTTPS=0``: http).
    """
    if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
        return None
    endpoint = os.environ.get("S3_ENDPOINT")
    if not endpoint:
        return None
    if "://" not in endpoint:
        scheme = "http" if os.environ.get("S3_USE_HTTPS", "1") == "0" else "https"
        endpoint = f"{scheme}://{endpoint}"
    return endpoint


_SETTINGS = re.compile(r"^(AWS_|S3_|GOOGLE_|GCE_|STORAGE_EMULATOR_HOST$|CLOUDSDK_|AZURE_|HADOOP_|FSSPEC_)")
_FILESYSTEMS: dict = {}
_FILESYSTEMS_LOCK = threading.Lock()


def _shared_filesystem(protocol: str):
    """One filesystem per protocol and settings in a process: making an S3 client costs
    ~0.1-0.5 s, and every task of a worker reads through the same one. The settings
    (the environment variables the backends read) are part of the key, so changed
    credentials get a new client."""
    key = (protocol, os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if _SETTINGS.match(k))))
    with _FILESYSTEMS_LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            fs = _FILESYSTEMS[key] = _make_filesystem(protocol)
        return fs


def _make_filesystem(protocol: str):
    import fsspec

    options = {"skip_instance_cache": True, "use_listings_cache": False}
    if protocol in ("s3", "s3a"):
        import s3fs  # noqa: F401  (ImportError: the backend is missing)

        endpoint = s3_endpoint()
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
        return fsspec.filesystem(protocol, **options)
    if protocol in ("gs", "gcs"):
        import gcsfs  # noqa: F401

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # gcsfs' default class asks the gRPC control plane for each bucket's layout,
            # which an emulator does not serve (a minute's timeout per request); the JSON
            # API class reads the same objects.
            from gcsfs.core import GCSFileSystem

            return GCSFileSystem(token="anon", **options)
        return fsspec.filesystem(protocol, token="google_default", **options)
    cls = fsspec.get_filesystem_class(protocol)
    try:
        return cls(**options)
    except TypeError:  # a backend without listings caches
        return cls()


def _backend_hint(protocol: str) -> str:
    package, extra = BACKENDS.get(protocol, (None, None))
    if package is None:
        return f"no fsspec backend is installed for {protocol}:// (see fsspec's list of implementations)"
    if extra:
        return f"reading {protocol}:// needs the {package} package: pip install 'tb-crash-signals[{extra}]'"
    return f"reading {protocol}:// needs the {package} package: pip install {package}"


def _causes(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _error_code(exc) -> str | None:
    for e in _causes(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            if code:
                return str(code)
        code = getattr(e, "code", None)
        if isinstance(code, str) and code:
            return code
    return None


def translate(exc: BaseException, where: str, protocol: str) -> StorageError:
    """`exc` (from fsspec or its backend) as a StorageError with a message fit for users."""
    if isinstance(exc, StorageError):
        return exc
    place = redact(where)
    names = {type(e).__name__ for e in _causes(exc)}
    if isinstance(exc, ImportError) or (isinstance(exc, ValueError) and "Protocol not known" in str(exc)):
        return StorageError(f"{place}: {_backend_hint(protocol)}", "backend")
    if names & {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}:
        return StorageError(f"{place}: no AWS credentials found: {_AWS_CREDENTIALS}", "credentials")
    if names & {"DefaultCredentialsError", "RefreshError"}:
        return StorageError(f"{place}: no usable Google credentials: {_GOOGLE_CREDENTIALS}", "credentials")
    code = _error_code(exc)
    if code in _REFUSED_CODES:
        hint = _AWS_CREDENTIALS if protocol in ("s3", "s3a") else "check the backend's credentials"
        return StorageError(f"{place}: the credentials were refused ({code}): {hint}", "credentials")
    if names & {"EndpointConnectionError", "ClientConnectorError", "ConnectTimeoutError", "ServerDisconnectedError"} \
            or isinstance(exc, ConnectionError):
        return StorageError(f"{place}: cannot connect to the storage endpoint ({_endpoint_hint(protocol)})", "io")
    if isinstance(exc, FileNotFoundError) or code in ("NoSuchBucket", "NoSuchKey", "404"):
        what = "no such bucket" if code == "NoSuchBucket" or "bucket" in str(exc).lower() else "no such bucket or path"
        return StorageError(f"{place}: {what}", "not_found")
    if isinstance(exc, PermissionError) or code in ("AccessDenied", "403", "AllAccessDisabled"):
        detail = f" ({code})" if code else ""
        return StorageError(f"{place}: access denied{detail}: the credentials in use may not read it", "permission")
    if code in ("401",):
        return StorageError(f"{place}: the credentials were refused (401): {_GOOGLE_CREDENTIALS}", "credentials")
    return StorageError(f"{place}: {type(exc).__name__}: {redact(exc)}", "io")


def _endpoint_hint(protocol: str) -> str:
    if protocol in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or s3_endpoint()
        return f"endpoint {redact(endpoint)}; AWS_ENDPOINT_URL or S3_ENDPOINT" if endpoint else "AWS's default endpoint"
    if protocol in ("gs", "gcs"):
        host = os.environ.get("STORAGE_EMULATOR_HOST")
        return f"STORAGE_EMULATOR_HOST={redact(host)}" if host else "Google's default endpoint"
    return f"{protocol}:// backend settings"
