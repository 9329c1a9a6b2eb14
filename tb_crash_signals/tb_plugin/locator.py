"""Where a TensorBoard run's event files are: run name -> directory.

With ``--logdir`` a run's name is its path relative to the logdir (``.`` for
the logdir itself); with ``--logdir_spec name:path,...`` runs are prefixed by
the group name. Remote logdirs (``gs://``...) have no local directory: the
plugin then analyses what TensorBoard holds.
"""

from __future__ import annotations

import os
import re

from tb_crash_signals.analysis.config import CONFIG_FILENAME

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
    """Maps TensorBoard run names to local run directories.

    With ``--logdir L`` a run is named by its path relative to L (``.`` for L
    itself). With ``--logdir_spec name:path,...`` runs under a named group are
    named ``name/<relative path>`` (TensorBoard joins them with
    ``os.path.join``, so the group's own directory is ``name/.``); unnamed
    groups add no prefix. Remote paths (``gs://``...) map to nothing.
    """

    def __init__(self, logdir: str | None = None, logdir_spec: str | None = None):
        self.roots: list[tuple[str | None, str]] = []
        self.remote = False
        if logdir:
            if _URI.match(logdir) or "://" in logdir:
                self.remote = True
            else:
                self.roots.append((None, os.path.expanduser(logdir)))
        elif logdir_spec:
            for path, name in parse_logdir_spec(logdir_spec).items():
                if _URI.match(path):
                    self.remote = True
                    continue
                self.roots.append((name, path))

    def candidates(self, run: str) -> list[str]:
        out = []
        if os.sep != "/":
            run = run.replace(os.sep, "/")
        for name, root in self.roots:
            if name is None:
                rel = run
            elif run == name:
                rel = "."
            elif run.startswith(name + "/"):
                rel = run[len(name) + 1 :]
            else:
                continue
            path = _join_run(root, rel)
            if path is not None:
                out.append(path)
        return out

    def directory(self, run: str) -> str | None:
        """The existing local directory holding `run`'s event files, or None."""
        for path in self.candidates(run):
            if os.path.isdir(path):
                return path
        return None

    def config_root(self) -> str | None:
        """Where `crash_signals.toml` is looked up: the logdir, or the first spec
        directory that holds one (else the first spec directory)."""
        for _, root in self.roots:
            if os.path.isfile(os.path.join(root, CONFIG_FILENAME)):
                return root
        return self.roots[0][1] if self.roots else None


def file_signature(directory: str | None):
    """(name, size, mtime) of the event files in a directory: changes when they grow."""
    if directory is None:
        return None
    try:
        out = []
        with os.scandir(directory) as it:
            for e in it:
                if "tfevents" not in e.name:
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
