"""Small builders shared by the engine tests."""

from __future__ import annotations

import numpy as np

from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.signals import SIGNALS, LogicalRun, TagRef
from tb_crash_signals.ingest.series import Series


def series(values, steps=None) -> Series:
    values = np.asarray(values, dtype=np.float64)
    steps = np.arange(values.shape[0]) if steps is None else np.asarray(steps)
    return Series.from_arrays(steps, values)


def logical(name="run", **data) -> LogicalRun:
    return LogicalRun(
        name=name,
        members=(name,),
        signals={k: (TagRef(name, k) if k in data else None) for k in SIGNALS},
        tags={name: tuple(data)},
    )


def analyze(config: Config | None = None, **data):
    """Analyses arrays given per dimension: analyze(train_loss=[...], grad_norm=[...])."""
    data = {k: (v if isinstance(v, Series) else series(v)) for k, v in data.items()}
    return analyze_run(logical(**data), data, config or Config())


def starts_both(code, config: Config | None = None, **data) -> tuple[list, list]:
    """Where `code`'s episodes start: from the batch rules, and from a Monitor fed the same
    arrays (point i of each at step i) step by step."""
    from tb_crash_signals.online.monitor import Monitor

    batch = [e.start_step for e in episodes_of(analyze(config, **data), code)]
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in data.items()}
    m = Monitor(config)
    for step in range(max(len(v) for v in arrays.values())):
        m.update(step, **{k: float(v[step]) for k, v in arrays.items() if step < len(v)})
    return batch, [e.start_step for e in m.episodes() if e.code == code]


def codes(result) -> set[str]:
    return {e.code for e in result.episodes}


def episodes_of(result, code):
    return [e for e in result.episodes if e.code == code]


def healthy_loss(n=2000, seed=0, noise=0.02, floor=0.3):
    """A decaying, noisy loss like a healthy classifier's per-step loss."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (2.0 * np.exp(-t / (n / 5)) + floor) * (1 + noise * rng.standard_normal(n))


def healthy_grad(n=2000, seed=1):
    rng = np.random.default_rng(seed)
    return np.exp(0.1 * rng.standard_normal(n)) * (1.0 + 0.5 * np.exp(-np.arange(n) / 100))


def logged_scalars(logdir, tags) -> dict:
    """{step: {tag: value}} of the scalars `tags` in the event files of `logdir`, read back with
    TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    steps = {}
    for tag in tags:
        for e in acc.Scalars(tag):
            steps.setdefault(e.step, {})[tag] = e.value
    return steps


def trained_seeds(tmp_path_factory, name: str, train, seeds, **options):
    """A fresh folder `name` holding one run per seed, `seed<N>`, each trained by
    `train(logdir, seed, **options)`."""
    logdir = tmp_path_factory.mktemp(name)
    for seed in seeds:
        train(logdir / f"seed{seed}", seed, **options)
    return logdir


def incidents_told(monitor, fields=("severity", "headline")) -> list[tuple]:
    """A Monitor's incidents as tuples of `fields`, to compare with incidents_scanned."""
    return [tuple(getattr(i, f) for f in fields) for i in monitor.incidents()]


def incidents_scanned(run: dict, fields=("severity", "headline")) -> list[tuple]:
    """A scanned run's incidents (its report entry) as tuples of `fields`."""
    return [tuple(i[f] for f in fields) for i in run["incidents"]]


def monitor_replaying(logdir, tags: dict, **options):
    """A Monitor fed, step by step, the scalars of the event files in `logdir` (logged_scalars):
    `tags` maps each tag to the Monitor's signal name."""
    from tb_crash_signals.online.monitor import Monitor

    monitor = Monitor(**options)
    for step, values in sorted(logged_scalars(logdir, tags).items()):
        monitor.update(step, **{tags[tag]: value for tag, value in values.items()})
    return monitor
