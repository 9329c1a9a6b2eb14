"""Callbacks for the training loops people already run.

    from tb_crash_signals.integrations.hf import CrashSignalsCallback         # transformers Trainer
    from tb_crash_signals.integrations.lightning import CrashSignals          # Lightning Trainer
    from tb_crash_signals.integrations.keras import CrashSignals              # Keras 3 model.fit

Each feeds what its framework already computes into a `Monitor`, reports each
incident once through the framework's logger when it opens, and stops training
on a critical one (`stop_on` codes, as the Monitor has; `stop=False` only
reports). Each module imports its framework when it is imported, not before:
importing this package needs none of them.
"""
