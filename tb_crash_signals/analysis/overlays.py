"""What the rules in force draw on the charts: threshold lines and healthy bands."""

from __future__ import annotations

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.rules.base import BandEdge, Threshold


def chart_overlays(config: Config) -> tuple[dict, dict]:
    """(thresholds, bands) declared by the enabled rules, with the parameters in force.

    thresholds: signal -> value of the line; bands: signal -> [low, high]
    (an edge no enabled rule declares is None).
    """
    thresholds: dict[str, float] = {}
    bands: dict[str, list] = {}
    for code in config.enabled_codes():
        params = config.params_for(code)
        for overlay in RULES[code].overlays:
            value = float(getattr(params, overlay.param))
            if isinstance(overlay, Threshold):
                thresholds.setdefault(overlay.signal, value)
            elif isinstance(overlay, BandEdge):
                band = bands.setdefault(overlay.signal, [None, None])
                band[0 if overlay.edge == "low" else 1] = value
    return thresholds, bands
