"""TensorBoard's entry point for the Crash Signals tab: a light loader.

`setup.py` declares ``crash_signals = tb_crash_signals.loader:CrashSignalsLoader``
under ``tensorboard_plugins``. TensorBoard imports this module at startup,
before it parses flags, and an ImportError here would stop TensorBoard itself,
so this module imports nothing but TensorBoard's own base classes and the
plugin's names (`tb_plugin.metadata`, constants only). The plugin
(numpy, the engine, the rules) is imported inside :meth:`load`; if that fails
the reason is logged and the tab is simply not offered.
"""

from __future__ import annotations

import logging
import os

from tensorboard.plugins import base_plugin

from tb_crash_signals.tb_plugin.metadata import CONFIG_FLAG, PLUGIN_NAME

# TensorBoard's logger ("tensorboard"); its messages reach TensorBoard's log.
logger = logging.getLogger("tensorboard")


class CrashSignalsLoader(base_plugin.TBLoader):
    """Defines `--crash_signals_config` and builds the plugin lazily."""

    def define_flags(self, parser):
        group = parser.add_argument_group(PLUGIN_NAME)
        group.add_argument(
            f"--{CONFIG_FLAG}",
            metavar="PATH",
            type=str,
            default=None,
            help="Crash Signals: TOML configuration (rule selection, parameters, tag "
            "mapping). Default: crash_signals.toml at the logdir root, if present. "
            "A bad file is reported in the tab, not fatal.",
        )

    def fix_flags(self, flags):
        # Never raise here: a bad path must show in the tab, not stop TensorBoard.
        path = getattr(flags, CONFIG_FLAG, None)
        if isinstance(path, str):
            path = path.strip()
            setattr(flags, CONFIG_FLAG, os.path.expanduser(path) if path else None)

    def load(self, context):
        try:
            from tb_crash_signals.tb_plugin import plugin
        except Exception as e:  # ImportError, or anything a dependency raises
            logger.error(
                "Crash Signals tab disabled: cannot import tb_crash_signals.tb_plugin.plugin: %s: %s",
                type(e).__name__,
                e,
                exc_info=True,
            )
            return None
        try:
            return plugin.CrashSignalsPlugin(context)
        except Exception as e:
            logger.error(
                "Crash Signals tab disabled: the plugin failed to start: %s: %s",
                type(e).__name__,
                e,
                exc_info=True,
            )
            return None
