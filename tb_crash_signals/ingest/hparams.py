"""Hyperparameters a run's writers left beside its scalars, read without trusting them.

Three places, per TensorBoard run directory:

* **TensorBoard's hparams plugin data**: the `_hparams_/session_start_info`
  summary (an `HParamsPluginData` proto) written by Keras' HParams callback,
  `SummaryWriter.add_hparams`, `tensorboard.plugins.hparams.api` and
  Lightning's `TensorBoardLogger`. Event files are searched for the tag's
  bytes first (memory-mapped, so a file without it costs one pass of
  `find`); only the records holding it are parsed.
* **Lightning's `hparams.yaml`** beside the event files. Lightning dumps
  objects with `!!python/object:...` tags and nested `OrderedDict` state:
  the file is read with a SafeLoader subclass that turns every tag it does
  not know into a :class:`Skipped` marker, so nothing is ever constructed;
  nested mappings are flattened to `a/b` keys (as Lightning flattens them
  for TensorBoard) and only plain scalars are kept.
* **HuggingFace's `TrainingArguments`**, logged by its TensorBoard callback
  as JSON text under the tag `args/text_summary`: its top-level scalars.

Nothing here decides which source wins; `analysis.hparams` merges them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import mmap
import os

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from tb_crash_signals.ingest import records

__all__ = [
    "SESSION_START_TAG", "HF_ARGS_TAG", "HPARAMS_YAML", "Skipped", "DirHParams",
    "from_plugin_content", "from_args_json", "read_event_hparams", "read_hparams_yaml", "read_dir",
]

SESSION_START_TAG = "_hparams_/session_start_info"
HF_ARGS_TAG = "args/text_summary"
HPARAMS_YAML = "hparams.yaml"
HPARAMS_PLUGIN = "hparams"

MAX_YAML_BYTES = 1 << 20  # Lightning's files are a few KB; more is not a hparams file
MAX_TEXT_BYTES = 1 << 20
MAX_KEYS = 500  # kept per source
MAX_STRING = 200  # characters of a string value kept
_MAX_DEPTH = 6  # nesting flattened from hparams.yaml
_MAX_NODES = 5000  # nodes visited while flattening (aliases can make a small file a huge tree)
_YAML_PREFIX = "tag:yaml.org,2002:"

_NEEDLES = (SESSION_START_TAG.encode(), HF_ARGS_TAG.encode())


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A value that was not read: a YAML tag we do not construct, a list, a nested message..."""

    what: str


@dataclasses.dataclass
class DirHParams:
    """What one run directory holds, per source.

    Attributes:
        tensorboard: the hparams plugin's values (last session_start_info
            written), or None if the directory has none.
        yaml: the scalars of hparams.yaml, or None without a file.
        text_args: HuggingFace's TrainingArguments scalars, or None.
        skipped: "source: key (why)" for each value not kept.
        problems: what could not be read, one line each.
    """

    tensorboard: dict | None = None
    yaml: dict | None = None
    text_args: dict | None = None
    skipped: list = dataclasses.field(default_factory=list)
    problems: list = dataclasses.field(default_factory=list)


def _scalar(value):
    """A kept value (bool, int, finite float, bounded str) or a Skipped marker."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING else value[: MAX_STRING - 1] + "…"
    if value is None:
        return "None"
    return Skipped(type(value).__name__)


# -- TensorBoard's hparams plugin data ------------------------------------------------------


def from_plugin_content(content: bytes) -> tuple[dict | None, list]:
    """The hparams of one `HParamsPluginData` (SummaryMetadata.plugin_data.content).

    Returns (values or None if it holds no session_start_info, skipped lines).
    Raises DecodeError for bytes that are not the proto.
    """
    data = plugin_data_pb2.HParamsPluginData.FromString(bytes(content))
    if not data.HasField("session_start_info"):
        return None, []
    values, skipped = {}, []
    for key in sorted(data.session_start_info.hparams):
        v = data.session_start_info.hparams[key]
        kind = v.WhichOneof("kind")
        if kind == "number_value":
            got = _scalar(float(v.number_value))
        elif kind == "string_value":
            got = _scalar(v.string_value)
        elif kind == "bool_value":
            got = bool(v.bool_value)
        else:
            got = Skipped(kind or "empty value")
        if isinstance(got, Skipped):
            skipped.append(f"tensorboard: {key} ({got.what})")
        elif len(values) < MAX_KEYS:
            values[key] = got
    return values, skipped


def from_args_json(text: str) -> tuple[dict | None, list]:
    """Top-level scalars of HuggingFace's TrainingArguments JSON; (None, []) if not a JSON object."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None, []
    if not isinstance(obj, dict):
        return None, []
    values, skipped = {}, []
    for key, value in obj.items():
        got = _scalar(value)
        if isinstance(got, Skipped):
            skipped.append(f"text args: {key} ({got.what})")
        elif len(values) < MAX_KEYS:
            values[str(key)] = got
    return values, skipped


def _text_of(value) -> str | None:
    t = value.tensor
    if t.string_val:
        return t.string_val[0][:MAX_TEXT_BYTES].decode("utf-8", "replace")
    return None


def read_event_hparams(run_dir: str) -> DirHParams:
    """The hparams plugin's and HuggingFace's values in the event files of `run_dir`.

    Files are read in name order and records in file order; a later
    session_start_info (a resumed run) replaces an earlier one.
    """
    out = DirHParams()
    try:
        names = sorted(e.name for e in os.scandir(run_dir) if "tfevents" in e.name and e.is_file())
    except OSError as e:
        out.problems.append(f"cannot list {run_dir}: {e.strerror or e}")
        return out
    for name in names:
        path = os.path.join(run_dir, name)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if not size:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                    _scan_file(buf, name, out)
        except (OSError, ValueError) as e:
            out.problems.append(f"cannot read hparams from {name}: {getattr(e, 'strerror', None) or e}")
    return out


def _scan_file(buf, name: str, out: DirHParams) -> None:
    hits = []
    for needle in _NEEDLES:
        at = buf.find(needle)
        while at >= 0:
            hits.append(at)
            at = buf.find(needle, at + 1)
    if not hits:
        return
    res = records.scan_records(buf, 0, verify_data=False)
    if not res.offsets.shape[0]:
        return
    starts, lengths = res.offsets.tolist(), res.lengths.tolist()
    wanted = sorted({_record_of(starts, lengths, h) for h in hits} - {None})
    bad = 0
    for i in wanted:
        data = buf[starts[i] : starts[i] + lengths[i]]
        crc = int.from_bytes(buf[starts[i] + lengths[i] : starts[i] + lengths[i] + 4], "little")
        if records.masked_crc32c(data) != crc:
            bad += 1
            continue
        try:
            event = event_pb2.Event.FromString(data)
        except DecodeError:
            bad += 1
            continue
        for value in event.summary.value:
            _take(value, out)
    if bad:
        out.problems.append(f"{bad} corrupt hparams record{'s' if bad != 1 else ''} skipped in {name}")


def _record_of(starts, lengths, at: int):
    i = bisect.bisect_right(starts, at) - 1
    if i >= 0 and at < starts[i] + lengths[i]:
        return i
    return None


def _take(value, out: DirHParams) -> None:
    plugin = value.metadata.plugin_data.plugin_name
    if value.tag == SESSION_START_TAG and plugin == HPARAMS_PLUGIN:
        try:
            values, skipped = from_plugin_content(value.metadata.plugin_data.content)
        except DecodeError:
            out.problems.append("unreadable hparams plugin data skipped")
            return
        if values is not None:
            out.tensorboard = values
            out.skipped[:] = [s for s in out.skipped if not s.startswith("tensorboard:")] + skipped
    elif value.tag == HF_ARGS_TAG:
        text = _text_of(value)
        if text is not None:
            values, skipped = from_args_json(text)
            if values is not None:
                out.text_args = values
                out.skipped.extend(skipped)


# -- hparams.yaml ---------------------------------------------------------------------------


def _safe_loader():
    """A PyYAML SafeLoader subclass that never constructs an object (None without PyYAML)."""
    try:
        import yaml
    except ImportError:
        return None

    class HParamsLoader(yaml.SafeLoader):
        """SafeLoader whose unknown tags (`!!python/object:...`, `!!python/tuple`, any `!x`)
        become Skipped markers instead of errors; their content is never constructed."""

    def skip(loader, node):
        tag = str(node.tag)
        return Skipped("!!" + tag[len(_YAML_PREFIX):] if tag.startswith(_YAML_PREFIX) else tag)

    HParamsLoader.add_constructor(None, skip)
    return HParamsLoader


def _flatten(obj, prefix, values, skipped, depth, source, budget):
    budget[0] -= 1
    if len(values) >= MAX_KEYS or budget[0] < 0:
        return
    if isinstance(obj, dict):
        if depth >= _MAX_DEPTH:
            skipped.append(f"{source}: {prefix or '(root)'} (nested too deep)")
            return
        for key, v in obj.items():
            name = f"{prefix}/{key}" if prefix else str(key)
            _flatten(v, name, values, skipped, depth + 1, source, budget)
        return
    if isinstance(obj, Skipped):
        skipped.append(f"{source}: {prefix} ({obj.what})")
        return
    if isinstance(obj, (list, tuple, set)):
        skipped.append(f"{source}: {prefix} (a list)")
        return
    got = _scalar(obj)
    if isinstance(got, Skipped):
        if type(obj).__name__ in ("datetime", "date"):
            values[prefix] = str(obj)
        else:
            skipped.append(f"{source}: {prefix} ({got.what})")
        return
    values[prefix] = got


def read_hparams_yaml(path: str) -> tuple[dict | None, list, list]:
    """Plain scalars of a Lightning `hparams.yaml`: (values or None, skipped, problems)."""
    loader = _safe_loader()
    if loader is None:
        return None, [], [f"{HPARAMS_YAML} skipped: PyYAML is not installed (pip install 'tb-crash-signals[hparams]')"]
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except OSError as e:
        return None, [], [f"cannot read {HPARAMS_YAML}: {e.strerror or e}"]
    if len(raw) > MAX_YAML_BYTES:
        return None, [], [f"{HPARAMS_YAML} skipped: larger than {MAX_YAML_BYTES} bytes"]
    import yaml

    parser = None
    try:
        parser = loader(raw)  # what yaml.safe_load does, with the marker-making SafeLoader subclass
        obj = parser.get_single_data()
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, [], [f"{HPARAMS_YAML} skipped: not valid YAML ({first})"]
    finally:
        if parser is not None:
            parser.dispose()
    if obj is None:
        return {}, [], []
    if not isinstance(obj, dict):
        return None, [], [f"{HPARAMS_YAML} skipped: not a mapping at the top"]
    values, skipped = {}, []
    budget = [_MAX_NODES]
    _flatten(obj, "", values, skipped, 0, HPARAMS_YAML, budget)
    if budget[0] < 0:
        skipped.append(f"{HPARAMS_YAML}: the rest (more than {_MAX_NODES} entries)")
    return values, skipped, []


def read_dir(run_dir: str) -> DirHParams:
    """Every source of one run directory (event files, hparams.yaml)."""
    out = read_event_hparams(run_dir)
    path = os.path.join(run_dir, HPARAMS_YAML)
    if os.path.isfile(path):
        values, skipped, problems = read_hparams_yaml(path)
        out.yaml = values
        out.skipped.extend(skipped)
        out.problems.extend(problems)
    return out
