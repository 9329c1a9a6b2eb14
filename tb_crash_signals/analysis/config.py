"""The TOML configuration shared by the CLI, the plugin and the monitor.

```toml
select = ["CS1", "CS201"]      # codes or code prefixes to run (default: all)
ignore = ["CS111"]             # codes or code prefixes to skip

[signals]                      # dimension -> tag name(s), first present wins
train_loss = "loss/total"
grad_norm = ["optim/gnorm", "gnorm"]

[rules.grad-norm-threshold]    # by symbol or code: parameters and "severity"
threshold = 50.0
severity = "warning"
```

Every unknown key or wrongly typed value is a `ConfigError` whose message
names the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import sys
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from tb_crash_signals.analysis.rules import RULES, SEVERITIES
from tb_crash_signals.analysis.rules.base import param_bounds
from tb_crash_signals.analysis.signals import SIGNALS

CONFIG_FILENAME = "crash_signals.toml"
_TOP_KEYS = ("preset", "select", "ignore", "signals", "rules")
# The source article's four rules with its exact conditions and severities, for code written
# against it: a grad norm above 100 (Inf included), a loss 3x the previous one, validation
# stagnation, and overfitting as critical.
ARTICLE_CODES = ("CS101", "CS111", "CS302", "CS401")


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the user."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Rule selection, tag overrides and parameters in force.

    Attributes:
        select: code prefixes to run (None = every default rule); an opt-in
            rule runs only when its exact code is selected.
        ignore: code prefixes to skip.
        signals: dimension -> tag names overriding the name patterns.
        params: rule code -> its frozen params dataclass instance.
        severities: rule code -> severity in force.
        path: the file this came from, if any.
    """

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    signals: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    severities: Mapping[str, str] = dataclasses.field(default_factory=dict)
    path: str | None = None

    def enabled_codes(self) -> list[str]:
        codes = []
        for code, rule in RULES.items():
            if self.select is None:
                if not rule.default:
                    continue
            elif code not in self.select and not (
                rule.default and any(code.startswith(s) for s in self.select)
            ):
                continue
            if any(code.startswith(s) for s in self.ignore):
                continue
            codes.append(code)
        return codes

    def params_for(self, code: str):
        return self.params.get(code) or RULES[code].default_params()

    def severity_for(self, code: str) -> str:
        return self.severities.get(code, RULES[code].severity)

    def with_selection(self, select=None, ignore=None) -> "Config":
        """A copy with command-line selection applied on top of the file's."""
        changes = {}
        if select is not None:
            changes["select"] = tuple(_codes(select, "--select"))
        if ignore is not None:
            changes["ignore"] = tuple(self.ignore) + tuple(_codes(ignore, "--ignore"))
        return dataclasses.replace(self, **changes)


def _codes(values, key: str) -> list[str]:
    if isinstance(values, str):
        values = [v for v in values.split(",")]
    if not isinstance(values, (list, tuple)):
        raise ConfigError(f"{key}: expected a list of rule codes")
    out = []
    for v in values:
        if not isinstance(v, str):
            raise ConfigError(f"{key}: expected rule codes as strings, got {v!r}")
        v = v.strip().upper()
        if not v:
            continue
        if not any(code.startswith(v) for code in RULES):
            by_symbol = [c for c, r in RULES.items() if r.symbol == v.lower()]
            if not by_symbol:
                raise ConfigError(f"{key}: {v!r} matches no rule code or symbol")
            v = by_symbol[0]
        out.append(v)
    return out


def _rule_code(name: str) -> str:
    if name.upper() in RULES:
        return name.upper()
    for code, r in RULES.items():
        if r.symbol == name:
            return code
    raise ConfigError(f"rules.{name}: no rule has this code or symbol")


def _coerce(key: str, value, default, bounds=None):
    """Checks a parameter value against its default's type and its declared range."""
    given = value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an integer beyond float range (TOML allows 10**400)
                value = math.inf
            ok = math.isfinite(value)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        shown = repr(given) if len(repr(given)) <= 40 else repr(given)[:37] + "..."
        raise ConfigError(
            f"{key}: expected {type(default).__name__} (like {default!r}), got {shown}"
        )
    if isinstance(value, (int, float)) and value < 0:
        raise ConfigError(f"{key}: must not be negative, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value > _MAX_INT_PARAM:
        raise ConfigError(f"{key}: must be at most {_MAX_INT_PARAM}, got {value!r}")
    if bounds is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not bounds.admits(value):
            raise ConfigError(f"{key}: must be {bounds.describe()}, got {value!r}")
    return value


# Point counts beyond this are no window any run has (and overflow C sizes).
_MAX_INT_PARAM = 10**9


def article_config(with_defaults: bool = False) -> Config:
    """The `article` preset: the source article's four rules, as the article states them.

    With `with_defaults`, the default catalogue runs too (the compat monitor: the
    article's rules on its steps, and the rest of the catalogue beside them).
    """
    article = from_dict({
        "select": list(ARTICLE_CODES),
        "rules": {
            "CS101": {"count_nonfinite": True, "min_rise": 0.0},
            "CS302": {"min_level": 0.0, "tolerance": 0.001},
            "CS401": {"severity": "critical"},
        },
    })
    if not with_defaults:
        return article
    codes = tuple(dict.fromkeys(Config().enabled_codes() + list(ARTICLE_CODES)))
    return dataclasses.replace(article, select=codes)


PRESETS = {"article": article_config}


def from_dict(data: Mapping[str, Any], path: str | None = None) -> Config:
    """Validates a parsed TOML document into a Config."""
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} (expected one of: {', '.join(_TOP_KEYS)})"
        )
    if "preset" in data:
        name = data["preset"]
        if name not in PRESETS:
            raise ConfigError(f"preset: expected one of {', '.join(PRESETS)}, got {name!r}"[:200])
        return _overlay(PRESETS[name](), from_dict({k: v for k, v in data.items() if k != "preset"}, path))
    for key in ("select", "ignore"):
        if key in data and not isinstance(data[key], list):
            raise ConfigError(f"{key}: expected a list of rule codes, like [\"CS1\"]")
    select = _codes(data["select"], "select") if "select" in data else None
    ignore = _codes(data.get("ignore", []), "ignore")

    signals: dict[str, tuple[str, ...]] = {}
    raw_signals = data.get("signals", {})
    if not isinstance(raw_signals, dict):
        raise ConfigError("signals: expected a table like [signals] train_loss = \"loss\"")
    for dim, tags in raw_signals.items():
        if dim not in SIGNALS:
            raise ConfigError(
                f"signals.{dim}: unknown signal (expected one of: {', '.join(SIGNALS)})"
            )
        if isinstance(tags, str):
            tags = [tags]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ConfigError(f"signals.{dim}: expected a tag name or a list of tag names")
        signals[dim] = tuple(tags)

    params: dict[str, Any] = {}
    severities: dict[str, str] = {}
    raw_rules = data.get("rules", {})
    if not isinstance(raw_rules, dict):
        raise ConfigError("rules: expected tables like [rules.grad-norm-threshold]")
    for name, table in raw_rules.items():
        code = _rule_code(name)
        if not isinstance(table, dict):
            raise ConfigError(f"rules.{name}: expected a table of parameters")
        rule = RULES[code]
        defaults = rule.default_params()
        fields = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
        changes = {}
        for key, value in table.items():
            full = f"rules.{name}.{key}"
            if key == "severity":
                if value not in SEVERITIES:
                    raise ConfigError(
                        f"{full}: expected one of {', '.join(SEVERITIES)}, got {value!r}"
                    )
                severities[code] = value
                continue
            if key not in fields:
                raise ConfigError(
                    f"{full}: unknown parameter (known: {', '.join(fields)}, severity)"
                )
            changes[key] = _coerce(full, value, fields[key], param_bounds(rule.params, key))
        if code in params:
            raise ConfigError(f"rules.{name}: configured twice (by code and by symbol)")
        params[code] = dataclasses.replace(defaults, **changes)
    return Config(
        select=tuple(select) if select is not None else None,
        ignore=tuple(ignore),
        signals=signals,
        params=params,
        severities=severities,
        path=path,
    )


def _overlay(base: Config, top: Config) -> Config:
    """`top`'s settings over `base`'s (a preset under the file that names it)."""
    return Config(
        select=top.select if top.select is not None else base.select,
        ignore=tuple(base.ignore) + tuple(top.ignore),
        signals={**base.signals, **top.signals},
        params={**base.params, **top.params},
        severities={**base.severities, **top.severities},
        path=top.path,
    )


#: A config file is a few lines; anything bigger is not one and is not read into memory.
MAX_CONFIG_BYTES = 1 << 20


def _read_config_bytes(path: str, name: str) -> bytes:
    """The file's bytes; only a regular file, at most MAX_CONFIG_BYTES.

    The file may sit in a shared logdir: a FIFO named crash_signals.toml must not
    block the reader (O_NONBLOCK; a blocking open waits for a writer forever), and
    a link to /dev/zero must not be read until memory runs out.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{name}: cannot read: not a regular file")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name}: larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    return data


def load_config(path: str) -> Config:
    """Reads and validates a TOML config file.

    Raises:
        ConfigError: unreadable file, invalid TOML, unknown key or bad value;
            the message starts with the file name.
    """
    name = os.path.basename(path)
    try:
        data = tomllib.loads(_read_config_bytes(path, name).decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{name}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{name}: invalid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{name}: invalid TOML: not UTF-8 text") from None
    try:
        return from_dict(data, path=path)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None


def config_for_logdir(logdir: str, explicit: str | None = None) -> Config:
    """The explicit config file if given, else `crash_signals.toml` at the logdir root."""
    if explicit:
        return load_config(explicit)
    candidate = os.path.join(logdir, CONFIG_FILENAME)
    if os.path.isfile(candidate):
        return load_config(candidate)
    return Config()
