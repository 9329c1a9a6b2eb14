"""Log retention: a compacted copy of a logdir that keeps the evidence of a crash.

``compact_logdir(src, dst)`` writes a new logdir with the same runs, event
files and tags. Per scalar tag: the last `keep_last` steps in full; before
them, per bucket of `every` steps, the points at which the bucket's minimum
and maximum occur, its first and last non-finite points and its last point
(:mod:`.select`), plus the steps where the analysis' findings start, peak and
end, and stretches kept in full where thinning would change what the analysis
reports (:mod:`.plan`). Everything else (histograms, images, graphs, hparams)
is copied record for record (:mod:`.write`). The result is what TensorBoard
shows after its restart purge, so every reader sees the same series.
"""

from tb_crash_signals.compact.logdir import CompactError, CompactReport, check_paths, compact_logdir

__all__ = ["CompactError", "CompactReport", "check_paths", "compact_logdir"]
