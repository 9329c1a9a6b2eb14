"""tb-crash-signals: find the signals of a training crash before the crash.

Public API (imported lazily so that TensorBoard's plugin loader stays light):

    Monitor(config=None).update(step, train_loss=..., ...) -> opened episodes
    scan_logdir(logdir, config=None) -> report dict (schema 1)
    compact_logdir(src, dst, keep_last=1000, every=100) -> CompactReport
    analyze_run, Config, load_config, RULES
"""

__version__ = "0.1.0"

_LAZY = {
    "Monitor": ("tb_crash_signals.online.monitor", "Monitor"),
    "scan_logdir": ("tb_crash_signals.scan", "scan_logdir"),
    "compact_logdir": ("tb_crash_signals.compact", "compact_logdir"),
    "analyze_run": ("tb_crash_signals.analysis.engine", "analyze_run"),
    "Config": ("tb_crash_signals.analysis.config", "Config"),
    "load_config": ("tb_crash_signals.analysis.config", "load_config"),
    "ConfigError": ("tb_crash_signals.analysis.config", "ConfigError"),
    "RULES": ("tb_crash_signals.analysis.rules", "RULES"),
    "Series": ("tb_crash_signals.ingest.series", "Series"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tb_crash_signals' has no attribute {name!r}")
