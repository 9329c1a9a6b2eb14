"""The `sweep` answer: each run's hyperparameters and, per sweep, what its sick runs share.

Hyperparameters come through TensorBoard's data provider, so remote logdirs
and either loader work: `list_hyperparameters` where the provider implements
it (TensorBoard 2.21's own providers return nothing there), else the hparams
plugin's `_hparams_/session_start_info` tensors (`list_tensors`, whose
`plugin_content` is the `HParamsPluginData`), plus HuggingFace's
`args/text_summary` text. Lightning's `hparams.yaml` is read from the run's
local directory when it has one. Health and incident kinds are those of the
`runs` listing, so pending runs are left out until they are analysed.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from tensorboard.data import provider as tb_provider

from tb_crash_signals.analysis.hparams import assign
from tb_crash_signals.analysis.sweep import SweepParams, analyse_sweeps, fmt_value
from tb_crash_signals.ingest import hparams as ih
from tb_crash_signals.report.document import SCHEMA_VERSION
from tb_crash_signals.report.sweep import sweep_rows

logger = logging.getLogger("tensorboard")

TEXT_PLUGIN = "text"


def _dir_hparams(found, run) -> ih.DirHParams:
    d = found.get(run)
    if d is None:
        d = found[run] = ih.DirHParams()
    return d


def _from_hparams_api(provider, ctx, eid, found) -> bool:
    """Fills `found` from `list_hyperparameters` session groups; False when the provider has none."""
    try:
        result = provider.list_hyperparameters(ctx, experiment_ids=[eid])
    except (AttributeError, NotImplementedError, TypeError):
        return False
    groups = getattr(result, "session_groups", None) or []
    any_run = False
    for group in groups:
        values = {}
        for v in getattr(group, "hyperparameter_values", ()) or ():
            if v.value is not None:
                values[v.hyperparameter_name] = v.value
        for session in getattr(group, "sessions", ()) or ():
            if session.run is not None:
                _dir_hparams(found, session.run).tensorboard = dict(values)
                any_run = True
    return any_run


def _from_tensors(provider, ctx, eid, found) -> None:
    listing = provider.list_tensors(
        ctx, experiment_id=eid, plugin_name=ih.HPARAMS_PLUGIN,
        run_tag_filter=tb_provider.RunTagFilter(tags=[ih.SESSION_START_TAG]),
    )
    for run, tags in listing.items():
        meta = tags.get(ih.SESSION_START_TAG)
        if meta is None:
            continue
        d = _dir_hparams(found, run)
        try:
            values, skipped = ih.from_plugin_content(meta.plugin_content)
        except Exception:  # a corrupt proto is the file's problem, not the tab's
            d.problems.append("unreadable hparams plugin data skipped")
            continue
        if values is not None:
            d.tensorboard = values
            d.skipped.extend(skipped)


def _from_text(provider, ctx, eid, found) -> None:
    flt = tb_provider.RunTagFilter(tags=[ih.HF_ARGS_TAG])
    listing = provider.list_tensors(ctx, experiment_id=eid, plugin_name=TEXT_PLUGIN, run_tag_filter=flt)
    if not any(ih.HF_ARGS_TAG in tags for tags in listing.values()):
        return
    data = provider.read_tensors(ctx, experiment_id=eid, plugin_name=TEXT_PLUGIN, downsample=1, run_tag_filter=flt)
    for run, tags in data.items():
        points = tags.get(ih.HF_ARGS_TAG) or []
        if not points:
            continue
        arr = points[-1].numpy
        try:
            raw = arr.reshape(-1)[0] if arr.size else b""
        except (AttributeError, IndexError):
            continue
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        values, skipped = ih.from_args_json(text[: ih.MAX_TEXT_BYTES])
        if values is not None:
            d = _dir_hparams(found, run)
            d.text_args = values
            d.skipped.extend(skipped)


class SweepAnswers:
    """Builds the `sweep` payload; caches hparams.yaml reads and the last analysis."""

    def __init__(self, provider, locator, params: SweepParams | None = None):
        self._provider = provider
        self._locator = locator
        self._params = params or SweepParams()
        self._lock = threading.Lock()
        self._yaml: dict = {}  # path -> ((mtime, size), (values, skipped, problems))
        self._last = None  # (rows key, sweeps)

    def _yaml_of(self, directory):
        path = os.path.join(directory, ih.HPARAMS_YAML)
        try:
            st = os.stat(path)
        except OSError:
            return None
        sig = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._yaml.get(path)
        if cached is not None and cached[0] == sig:
            return cached[1]
        got = ih.read_hparams_yaml(path)
        with self._lock:
            if len(self._yaml) > 4096:
                self._yaml.clear()
            self._yaml[path] = (sig, got)
        return got

    def found(self, ctx, eid, runs) -> dict:
        """TensorBoard run -> ingest.hparams.DirHParams, for the runs TensorBoard lists."""
        found: dict = {}
        if self._provider is not None:
            if not _from_hparams_api(self._provider, ctx, eid, found):
                _from_tensors(self._provider, ctx, eid, found)
            _from_text(self._provider, ctx, eid, found)
        for run in runs:
            directory = self._locator.directory(run)
            if directory is None:
                continue
            got = self._yaml_of(directory)
            if got is None:
                continue
            d = _dir_hparams(found, run)
            d.yaml, skipped, problems = got
            d.skipped.extend(skipped)
            d.problems.extend(problems)
        return found

    def payload(self, ctx, eid, listing: dict, logical_runs) -> dict:
        """The `sweep` payload from the `runs` listing and the logical runs behind it."""
        names = set()
        for lr in logical_runs:
            names.add(lr.name)
            names.update(lr.members)
        hparams = assign(logical_runs, self.found(ctx, eid, sorted(names)))
        rows = sweep_rows(listing["runs"], hparams)
        key = json.dumps(rows, sort_keys=True, default=str)
        with self._lock:
            last = self._last
        if last is not None and last[0] == key:
            sweeps = last[1]
        else:
            sweeps = analyse_sweeps(rows, self._params)
            with self._lock:
                self._last = (key, sweeps)
        runs = []
        for item in listing["runs"]:
            rh = hparams.get(item["run"])
            runs.append({
                "run": item["run"],
                "health": item["health"],
                "headline": item.get("headline"),
                "kinds": item.get("kinds", {}),
                "hparams": rh.to_json() if rh is not None else None,
                # As the statements print them (JSON cannot tell 1.0 from 1).
                "shown": {k: fmt_value(v) for k, v in rh.values.items()} if rh is not None else {},
            })
        sweeps = [dict(s, constant_shown={k: fmt_value(v) for k, v in s["constant"].items()}) for s in sweeps]
        return {
            "schema": SCHEMA_VERSION,
            "config_error": listing.get("config_error"),
            "problems": listing.get("problems", []),
            "progress": listing.get("progress"),
            "sweeps": sweeps,
            "runs": runs,
        }


def failed_sweep(message, config_error=None) -> dict:
    return {
        "schema": SCHEMA_VERSION, "config_error": config_error, "problems": [message],
        "progress": {"analysed": 0, "pending": 0, "total": 0}, "sweeps": [], "runs": [],
    }
