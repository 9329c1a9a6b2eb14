"""The plugin's names, defined once (imported by TensorBoard's light entry point too)."""

PLUGIN_NAME = "crash_signals"
TAB_NAME = "Crash Signals"
CONFIG_FLAG = "crash_signals_config"
# The plugin whose data the tab analyses (TensorBoard's scalars).
SCALARS_PLUGIN = "scalars"
# `health` of a run listed before its analysis is done (big logdirs).
PENDING = "pending"
