"""What the commands share about a LOGDIR argument: local or remote, readable, its config file."""

from __future__ import annotations

import math
import os
import tempfile

from tb_crash_signals.analysis.config import CONFIG_FILENAME, Config, config_for_logdir, load_config
from tb_crash_signals.ingest.redact import redact
from tb_crash_signals.ingest.storage import Storage, StorageError, is_url, local_path, storage_for

MAX_REMOTE_CONFIG_BYTES = 1 << 20


class LogdirError(Exception):
    """A LOGDIR that cannot be read; the message is one line for users (no secrets)."""


def open_logdir(logdir: str) -> Storage:
    """The storage of `logdir` once it is known to be a readable directory (listed once)."""
    storage = storage_for(logdir, listing_interval=math.inf)
    if not storage.remote:
        if not os.path.isdir(local_path(logdir)):
            raise LogdirError(f"{logdir}: not a directory")
        return storage
    try:
        if not storage.isdir(logdir):
            raise LogdirError(f"{redact(logdir)}: no such directory (nothing is stored under it)")
    except StorageError as e:
        raise LogdirError(str(e)) from None
    return storage


def logdir_config(logdir: str, explicit: str | None, storage: Storage) -> Config:
    """`config_for_logdir`, reading ``crash_signals.toml`` from a remote logdir's root too.

    Raises:
        ConfigError: as `load_config`.
        LogdirError: the remote file cannot be read.
    """
    if explicit or not storage.remote or not is_url(logdir):
        return config_for_logdir(local_path(logdir), explicit)
    try:
        data = storage.read_small(storage.join(logdir.rstrip("/"), CONFIG_FILENAME), MAX_REMOTE_CONFIG_BYTES)
    except StorageError as e:
        raise LogdirError(str(e)) from None
    if data is None:
        return Config()
    with tempfile.TemporaryDirectory(prefix="tb-crash-signals-config-") as tmp:
        # load_config names the file in its messages: the same name as in the logdir.
        path = os.path.join(tmp, CONFIG_FILENAME)
        with open(path, "wb") as f:
            f.write(data)
        return load_config(path)
