"""Where event files are read from: the local filesystem, or any fsspec URL.

A `Storage` answers what the readers ask -- which run directories a logdir holds, which
event files a directory holds, a file's size, the bytes of a file from an offset -- for
one kind of location. `LOCAL` is the operating system's filesystem (plain `os` calls:
the reader is exactly as fast as without this layer); `storage_for(url)` returns an
`ingest.remote.FsspecStorage` for ``s3://``, ``gs://``, ``az://``, ``hdfs://`` and any
other protocol fsspec knows (its backend package installed).

Errors are `OSError`s, so the readers record them per file or per run as they always
have; a remote storage raises `StorageError`, whose message is safe to show (it names
the backend and the setting to change, never a secret).
"""

from __future__ import annotations

import os
import re

__all__ = ["Storage", "LocalStorage", "LOCAL", "StorageError", "is_url", "storage_for", "is_event_file"]

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def is_event_file(name: str) -> bool:
    """TensorBoard's test for an event file: the name contains ``tfevents``."""
    return "tfevents" in name


def is_url(path) -> bool:
    """Whether `path` is a URL (``s3://bucket/logs``) rather than a local path."""
    return isinstance(path, str) and bool(_URL.match(path))


class StorageError(OSError):
    """A remote storage failure with a message fit for users (no secrets).

    Attributes:
        kind: ``"backend"`` (the fsspec package for the protocol is missing),
            ``"credentials"`` (none found, or refused), ``"not_found"`` (no such
            bucket or path), ``"permission"``, or ``"io"`` (anything else).
    """

    def __init__(self, message: str, kind: str = "io"):
        super().__init__(message)
        self.strerror = message
        self.kind = kind

    def __str__(self):
        return self.strerror

    def __reduce__(self):  # errors cross process boundaries (pools, Dask) intact
        return (StorageError, (self.strerror, self.kind))

    @property
    def fatal(self) -> bool:
        """Nothing under this storage can be read until a setting changes."""
        return self.kind in ("backend", "credentials", "not_found", "permission")


class Storage:
    """The questions the readers ask of a location (paths are the storage's own strings).

    Attributes:
        remote: paths are URLs read over the network (not the local filesystem).
    """

    remote = False

    def normpath(self, path) -> str:
        raise NotImplementedError

    def isdir(self, path: str) -> bool:
        """Whether `path` is a directory that can be listed; raises StorageError when the
        storage itself cannot be used (backend or credentials missing)."""
        raise NotImplementedError

    def run_dirs(self, root: str) -> list[str]:
        """Relative names (``/``-separated, ``.`` for `root`) of the directories under
        `root` that hold an event file, sorted."""
        raise NotImplementedError

    def event_files(self, directory: str) -> list[str]:
        """Sorted names of the event files directly in `directory`."""
        raise NotImplementedError

    def size(self, path: str) -> int:
        raise NotImplementedError

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes of `path` from `offset` (fewer at the end of the file)."""
        raise NotImplementedError

    def prefetch(self, requests) -> None:
        """Starts fetching `requests` ((path, offset, length) that `read` will be asked for
        soon), so their latencies overlap; a hint that may be ignored (the local
        filesystem, a backend without concurrent requests, too many bytes ahead)."""

    def join(self, directory: str, name: str) -> str:
        raise NotImplementedError

    def run_path(self, root: str, run: str) -> str:
        """The directory of the run named `run` (as `run_dirs` names it) under `root`."""
        raise NotImplementedError

    def signature(self, directory: str):
        """Something that changes when the event files of `directory` change."""
        raise NotImplementedError

    def has_run(self, path: str) -> bool:
        """Whether `path` is a directory that may hold a run's event files."""
        raise NotImplementedError

    def portable(self, directories) -> "Storage":
        """This storage as a task reading `directories` elsewhere needs it (pickled small:
        a remote storage keeps only their part of its listing)."""
        return self

    def error(self) -> StorageError | None:
        """What keeps this storage from being read at all now (fatal), else None."""
        return None


class LocalStorage(Storage):
    """The local filesystem, through `os` (TensorBoard's walk: symlinks not followed)."""

    def normpath(self, path) -> str:
        return local_path(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def run_dirs(self, root: str) -> list[str]:
        runs = []
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            if any(is_event_file(f) for f in filenames):
                rel = os.path.relpath(dirpath, root)
                runs.append("." if rel == "." else rel.replace(os.sep, "/"))
        return sorted(runs)

    def event_files(self, directory: str) -> list[str]:
        with os.scandir(directory) as it:
            return sorted(e.name for e in it if is_event_file(e.name) and _is_file(e))

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def read(self, path: str, offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def join(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)

    def run_path(self, root: str, run: str) -> str:
        return root if run == "." else os.path.join(root, *run.split("/"))

    def has_run(self, path: str) -> bool:
        return os.path.isdir(path)

    def signature(self, directory: str):
        """(name, size, mtime) of the event files: changes when they grow."""
        try:
            out = []
            with os.scandir(directory) as it:
                for e in it:
                    if not is_event_file(e.name):
                        continue
                    try:
                        if not e.is_file():
                            continue
                        st = e.stat()
                    except OSError:
                        continue
                    out.append((e.name, st.st_size, st.st_mtime_ns))
            return tuple(sorted(out))
        except OSError as e:
            return ("error", e.strerror or str(e))

    def __reduce__(self):
        return (_local, ())


def _local():
    return LOCAL


def _is_file(entry) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


LOCAL = LocalStorage()


def storage_for(path, listing_interval: float = 5.0) -> Storage:
    """The storage that reads `path`: `LOCAL` for local paths (and ``file://``), else an
    fsspec storage rooted at the URL that lists it at most once per `listing_interval`
    seconds (TensorBoard's ``--reload_interval``)."""
    if not is_url(path) or path.startswith("file://"):
        return LOCAL
    from tb_crash_signals.ingest.remote import FsspecStorage

    return FsspecStorage(path, listing_interval=listing_interval)


def local_path(path) -> str:
    """`path` without a ``file://`` prefix (what LOCAL reads)."""
    path = os.fspath(path)
    return path[len("file://"):] if isinstance(path, str) and path.startswith("file://") else path
