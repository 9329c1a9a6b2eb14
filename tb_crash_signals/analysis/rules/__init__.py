"""The rule catalogue. Importing this package registers every rule.

Codes are stable and never reused: CS0xx non-finite/absolute bounds, CS1xx
thresholds/spikes/divergence, CS2xx growth, CS3xx plateau/stagnation, CS4xx
overfitting, CS5xx optimiser.
"""

from tb_crash_signals.analysis.rules import (  # noqa: F401  (registration)
    generalization,
    growth,
    nonfinite,
    optimizer,
    progress,
    spikes,
)
from tb_crash_signals.analysis.rules.base import FAMILIES, REGISTRY, SEVERITIES, Fit, Hits, Rule

RULES = dict(sorted(REGISTRY.items()))

__all__ = ["FAMILIES", "RULES", "SEVERITIES", "Fit", "Hits", "Rule"]
