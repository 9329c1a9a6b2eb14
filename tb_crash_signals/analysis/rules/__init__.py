"""The rule catalogue. Importing this package registers every rule of its modules.

Each module of this package holds whole rules (parameters, batch function,
streaming twin, description, overlays) and registers them with `@rule`; a
new module is picked up here without being listed. Codes are stable and
never reused: CS0xx non-finite/absolute bounds, CS1xx thresholds, spikes and
divergence, CS2xx growth, CS3xx plateau/stagnation, CS4xx overfitting, CS5xx
optimiser.
"""

import importlib
import pkgutil

from tb_crash_signals.analysis.rules.base import FAMILIES, REGISTRY, SEVERITIES, Fit, Hits, Rule

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "base":
        importlib.import_module(f"{__name__}.{_module}")

RULES = dict(sorted(REGISTRY.items()))

__all__ = ["FAMILIES", "RULES", "SEVERITIES", "Fit", "Hits", "Rule"]
