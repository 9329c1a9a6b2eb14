"""Climbs the run came back from: critical while they lasted, warnings once the run recovered.

A loss that climbs away from its best with the grad norm, or jumps with it, is a crash signal
while it lasts: the rules fire on the data up to that step and the online monitor raises the
alarm then. A noisy small-batch run or an aggressive schedule makes such climbs and comes back
from them on its own; once the episode closed (its rule quiet for its cooldown) and nothing
critical followed, the report tells it as a warning: the run is not sick, it had a scare.
"""

from __future__ import annotations

import dataclasses

from tb_crash_signals.analysis.episodes import Episode

# The rules whose episodes a run can come back from: a climb, a level that lost what it learnt,
# a jump. A NaN, an explosion past a bound or a threshold is no scare.
RECOVERABLE = ("CS113", "CS115", "CS202")


# Optimizer settings too large (incidents._OPTIMIZER_HIGH): a climb while one lasts is their symptom,
# and the run is sick however often the loss comes back.
_CAUSES = ("CS501", "CS512", "CS513")


def settled(episodes: list[Episode]) -> list[Episode]:
    """The episodes, with each closed critical climb (see RECOVERABLE) after which no critical
    episode starts, and not under a learning rate or update size out of band, told as a warning
    that the run came back from."""
    later = [e.start_step for e in episodes if e.severity == "critical" and not _recovered_kind(e)]
    last_open = max((e.start_step for e in episodes if e.severity == "critical" and _recovered_kind(e) and e.open),
                    default=None)
    causes = [e for e in episodes if e.code in _CAUSES and e.severity != "info"]
    out = []
    for e in episodes:
        if (e.severity == "critical" and _recovered_kind(e) and not e.open
                and not any(s > e.start_step for s in later)
                and not (last_open is not None and last_open > e.start_step)
                and not any(c.start_step <= e.end_step and e.start_step <= c.end_step for c in causes)):
            e = dataclasses.replace(e, severity="warning", message=f"{e.message}; the run came back from it")
        out.append(e)
    return out


def _recovered_kind(e: Episode) -> bool:
    return e.code in RECOVERABLE
