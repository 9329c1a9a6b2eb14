"""Where a TensorBoard run's event files are: run name -> directory (and its storage).

With ``--logdir`` a run's name is its path relative to the logdir (``.`` for
the logdir itself); with ``--logdir_spec name:path,...`` runs are prefixed by
the group name. Remote logdirs (``s3://``, ``gs://``...) map to URLs read through
fsspec (`ingest.remote`), listed at most once per TensorBoard reload interval;
when their backend or credentials are missing, runs map to nothing and the
plugin analyses what TensorBoard holds, saying why (`storage_error`).
"""

from __future__ import annotations

import os
import re

from tb_crash_signals.analysis.config import CONFIG_FILENAME
from tb_crash_signals.ingest.storage import LOCAL, Storage, storage_for

_URI = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://.*")


# -- run name -> directory --------------------------------------------------


def parse_logdir_spec(logdir_spec: str | None) -> dict:
    """`--logdir_spec` -> {path: group name or None}, as TensorBoard parses it.

    TensorBoard's own parser is used (it is private, so tests check it still
    behaves as below); a minimal equivalent takes over if it ever moves.
    """
    if logdir_spec is None:
        return {}
    try:
        from tensorboard.backend.event_processing.data_ingester import (
            _parse_event_files_spec,
        )
    except ImportError:
        return _parse_spec_fallback(logdir_spec)
    return _parse_event_files_spec(logdir_spec)


def _parse_spec_fallback(logdir_spec: str) -> dict:
    out = {}
    for item in logdir_spec.split(","):
        # "name:path" unless the item is a URI, an absolute path or a Windows drive.
        named = (
            not _URI.match(item)
            and ":" in item
            and not item.startswith("/")
            and not os.path.splitdrive(item)[0]
        )
        name, path = item.split(":", 1) if named else (None, item)
        if not _URI.match(path):
            path = os.path.realpath(os.path.expanduser(path))
        out[path] = name
    return out


def _join_run(root: str, rel: str) -> str | None:
    """root / rel for a TensorBoard relative run path, refusing anything escaping root."""
    if rel in ("", "."):
        return root
    parts = [p for p in re.split(r"[/\\]" if os.sep == "\\" else r"/", rel)]
    if any(p in ("", "..") for p in parts) or os.path.isabs(rel):
        return None
    parts = [p for p in parts if p != "."]
    return os.path.join(root, *parts) if parts else root


class RunLocator:
    """Maps TensorBoard run names to run directories (local paths or URLs).

    With ``--logdir L`` a run is named by its path relative to L (``.`` for L
    itself). With ``--logdir_spec name:path,...`` runs under a named group are
    named ``name/<relative path>`` (TensorBoard joins them with
    ``os.path.join``, so the group's own directory is ``name/.``); unnamed
    groups add no prefix. Remote roots are read through an fsspec storage each.

    Args:
        listing_interval: seconds between listings of a remote root
            (TensorBoard's ``--reload_interval``; 0: list once).
    """

    def __init__(self, logdir: str | None = None, logdir_spec: str | None = None,
                 listing_interval: float = 5.0):
        self.roots: list[tuple[str | None, str, Storage]] = []
        self.remote = False
        if logdir:
            if _URI.match(logdir) or "://" in logdir:
                self.remote = True
                self.roots.append((None, logdir.rstrip("/"), storage_for(logdir, listing_interval)))
            else:
                self.roots.append((None, os.path.expanduser(logdir), LOCAL))
        elif logdir_spec:
            for path, name in parse_logdir_spec(logdir_spec).items():
                if _URI.match(path):
                    self.remote = True
                    self.roots.append((name, path.rstrip("/"), storage_for(path, listing_interval)))
                else:
                    self.roots.append((name, path, LOCAL))

    def _candidates(self, run: str) -> list[tuple[str, Storage]]:
        out = []
        if os.sep != "/":
            run = run.replace(os.sep, "/")
        for name, root, storage in self.roots:
            if name is None:
                rel = run
            elif run == name:
                rel = "."
            elif run.startswith(name + "/"):
                rel = run[len(name) + 1 :]
            else:
                continue
            if storage.remote:
                path = _join_url(root, rel)
            else:
                path = _join_run(root, rel)
            if path is not None:
                out.append((path, storage))
        return out

    def candidates(self, run: str) -> list[str]:
        return [path for path, _ in self._candidates(run)]

    def directory(self, run: str) -> str | None:
        """The directory holding `run`'s event files (a URL on a remote root), or None."""
        for path, storage in self._candidates(run):
            if storage.has_run(path):
                return path
        return None

    def storage_of(self, path: str) -> Storage:
        """The storage that reads `path` (a directory `directory` returned)."""
        for _, root, storage in self.roots:
            if storage.remote and (path == root or path.startswith(root + "/")):
                return storage
        return LOCAL

    def signature(self, directory: str | None):
        """Something that changes when the event files of `directory` change (None: no directory)."""
        if directory is None:
            return None
        return self.storage_of(directory).signature(directory)

    def storage_error(self) -> str | None:
        """Why a remote root cannot be read at all (backend, credentials, bucket), else None."""
        for _, _, storage in self.roots:
            err = storage.error() if storage.remote else None
            if err is not None:
                return str(err)
        return None

    def config_root(self) -> str | None:
        """Where `crash_signals.toml` is looked up: the logdir, or the first spec
        directory that holds one (else the first spec directory); local roots only."""
        local = [root for _, root, storage in self.roots if not storage.remote]
        for root in local:
            if os.path.isfile(os.path.join(root, CONFIG_FILENAME)):
                return root
        return local[0] if local else None


def _join_url(root: str, rel: str) -> str | None:
    """root / rel for a run under a remote root, refusing anything escaping it."""
    if rel in ("", "."):
        return root
    parts = rel.split("/")
    if any(p in ("", "..") for p in parts):
        return None
    parts = [p for p in parts if p != "."]
    return f"{root}/{'/'.join(parts)}" if parts else root


def file_signature(directory: str | None):
    """(name, size, mtime) of the event files in a local directory: changes when they grow."""
    if directory is None:
        return None
    return LOCAL.signature(directory)
