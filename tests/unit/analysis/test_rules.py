"""A case per rule: a series that must fire, and one that must not."""

import dataclasses
import math

import numpy as np
import pytest

from support.helpers import analyze, codes, episodes_of, healthy_grad, healthy_loss, series, starts_both
from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.config import Config, article_config
from tb_crash_signals.analysis.rules import FAMILIES, RULES
from tb_crash_signals.analysis.rules.base import fmt
from tb_crash_signals.analysis.rules.loss_growth import FASTER, STEADY, climbing
from tb_crash_signals.online.monitor import Monitor


def test_catalogue_covers_every_family_with_stable_metadata():
    assert {r.family for r in RULES.values()} == set(FAMILIES)
    symbols = [r.symbol for r in RULES.values()]
    assert len(symbols) == len(set(symbols))
    for code, r in RULES.items():
        assert code.startswith("CS") and len(code) == 5
        assert r.doc and r.advice, code
        params = r.default_params()
        assert dataclasses.is_dataclass(params)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(params, dataclasses.fields(params)[0].name, 1)


def test_healthy_run_raises_nothing_critical():
    n = 3000
    lr = np.concatenate([np.linspace(1e-5, 1e-3, 100), np.linspace(1e-3, 1e-5, n - 100)])
    result = analyze(
        train_loss=healthy_loss(n),
        grad_norm=healthy_grad(n),
        lr=lr,
        update_ratio=np.full(n // 10, 1e-3),
    )
    assert not [e for e in result.episodes if e.severity == "critical"], result.episodes
    assert result.health in ("ok", "warning")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_fires_at_first_bad_value(bad):
    loss = healthy_loss(500)
    loss[321:] = bad
    eps = episodes_of(analyze(train_loss=loss), "CS001")
    assert len(eps) == 1 and eps[0].start_step == 321 and eps[0].open
    assert eps[0].severity == "critical"
    assert "CS001" not in codes(analyze(train_loss=healthy_loss(500)))


def test_a_nonfinite_validation_loss_with_a_finite_train_loss_is_the_evaluation_s():
    # The evaluation at step 300 gave NaN (an empty batch, NaN in the data) while training went on: a
    # warning with its own advice, not a crash. With the train loss NaN too, or no train loss to tell,
    # it is the crash. The monitor decides alike.
    from tb_crash_signals.analysis.incidents import build_incidents

    train = healthy_loss(500)
    evals = np.arange(0, 500, 50)
    val = healthy_loss(500, seed=3)[evals] * 1.1
    val[evals == 300] = np.nan
    result = analyze(train_loss=train, val_loss=series(val, evals))
    assert "CS001" not in codes(result) and result.health == "warning"
    (told,) = episodes_of(result, "CS005")
    assert (told.start_step, told.severity) == (300, "warning") and "while the train loss is finite" in told.message
    (incident,) = [i for i in build_incidents(result.episodes, 500) if i.kind == "nonfinite"]
    assert incident.severity == "warning" and incident.advice == RULES["CS005"].advice
    assert starts_both_at("CS005", {"train_loss": series(train), "val_loss": series(val, evals)}) == ([300], [300])
    crashed = train.copy()
    crashed[300:] = np.nan
    for data in ({"train_loss": series(crashed), "val_loss": series(val, evals)}, {"val_loss": series(val, evals)}):
        batch, online = starts_both_at("CS001", data)
        assert batch and batch == online and starts_both_at("CS005", data) == ([], [])


def test_loss_bound_catches_a_loss_that_rose_beyond_it_from_a_plausible_start():
    loss = healthy_loss(300)
    loss[200:] = np.geomspace(3.0, 3.7e5, 100)
    crossing = 200 + int(np.argmax(loss[200:] > 1e4))
    assert starts_both("CS002", train_loss=loss) == ([crossing], [crossing])
    assert "CS002" not in codes(analyze(train_loss=np.array([11.0, 9.0, 7.0])))


def test_a_loss_that_starts_beyond_the_bound_tells_its_scale_not_an_explosion():
    # MSE on unnormalised targets (~1e3) or an ELBO summed over the batch: 1e6 from the first point,
    # falling as it learns, with minibatch noise that crosses the bound again now and then.
    rng = np.random.default_rng(4)
    loss = 1.3e6 * np.exp(-np.arange(600) / 40) + 2e3 * np.exp(0.6 * rng.standard_normal(600))
    assert (loss[100:] > 1e4).any()
    assert starts_both("CS002", train_loss=loss) == ([], [])
    # A first point beyond the bound has no start to have risen from: the next one decides. 1000x
    # lower, the first logged interval blew up (a Keras epoch's mean; the model collapsed to chance).
    blew_up = np.array([3.7e4, 2.4, 2.35, 2.33, 2.31])
    assert starts_both("CS002", train_loss=blew_up) == ([1], [1])
    (told,) = episodes_of(analyze(train_loss=blew_up), "CS002")
    assert told.severity == "critical" and "first point, 37000, was beyond the bound" in told.message
    assert starts_both("CS002", train_loss=np.array([3.7e4, 900.0, 2.35, 2.33, 2.31])) == ([], [])
    # `min_rise` 0: the plain bound, from the first point on.
    plain = Config(params={"CS002": dataclasses.replace(RULES["CS002"].default_params(), min_rise=0.0)})
    assert [e.start_step for e in episodes_of(analyze(plain, train_loss=loss), "CS002")][0] == 0


def test_collapse_onto_a_uniform_guess_after_a_fall_from_far_above_it():
    # Keras epoch losses of a 10-class model whose first epoch blew up: 5.5, then ln 10 for good.
    rng = np.random.default_rng(2)
    stuck = math.log(10) * (1.002 + 0.0005 * rng.standard_normal(20))
    collapsed = np.concatenate([[5.5], stuck])
    eps = episodes_of(analyze(train_loss=collapsed), "CS116")
    assert [e.start_step for e in eps] == [8] and eps[0].severity == "critical"
    assert "ln 10" in eps[0].message and "5.5" in eps[0].message
    # Not without the fall: a run stuck at chance from its start (a plateau), one that blew up to
    # a level that is no ln k, one that converges gradually onto ln 3, one that is not flat.
    at_chance = np.concatenate([[2.4], stuck])
    off_chance = np.concatenate([[5.5], stuck * 1.05])
    converging = np.concatenate([math.log(3) * (1 + 2.0 * np.exp(-np.arange(300) / 40)), [math.log(3)] * 12])
    noisy = np.concatenate([[5.5], math.log(10) * (1 + 0.02 * rng.standard_normal(20))])
    for loss in (at_chance, off_chance, converging, noisy):
        assert "CS116" not in codes(analyze(train_loss=loss))
    # The online monitor decides alike, point by point.
    for loss, fires in ((collapsed, True), (at_chance, False), (converging, False), (noisy, False)):
        m = Monitor()
        for step, value in enumerate(loss.tolist()):
            m.update(step, train_loss=value)
        assert [e.start_step for e in m.episodes() if e.code == "CS116"] == ([8] if fires else [])


def test_loss_blowup_in_one_point_or_multiplying_over_a_few():
    rng = np.random.default_rng(3)
    base = 2.3 * (1 + 0.01 * rng.standard_normal(24))
    one_point = np.concatenate([base, [300.0, 2.3, 2.3]])  # 130x in one point
    # An epoch-level run that multiplies at every point: 3.4, 11, 31 is 12x its median at 31.
    climbing = np.concatenate([base, [3.37, 11.1, 30.9, 80.4, 174.0]])
    # A spike that builds over two points and falls back, 2.3 -> 3.1 -> 9 (3.9x): no crash; nor a
    # climb of 1.2x a point (the loss-growth rules tell that); nor tiny-batch noise near zero.
    spike = np.concatenate([base, [3.1, 9.0, 2.4, 2.3, 2.3]])
    gradual = np.concatenate([base, 2.3 * 1.2 ** np.arange(1, 15)])
    noise = 0.01 * np.exp(1.6 * rng.standard_normal(300))
    cases = ((one_point, [24], "in one point"), (climbing, [26], "multiplying at every point from 3.37"),
             (spike, [], None), (gradual, [], None), (noise, [], None))
    for loss, starts, note in cases:
        eps = episodes_of(analyze(train_loss=loss), "CS114")
        assert [e.start_step for e in eps] == starts, loss
        if note:
            assert eps[0].severity == "critical" and note in eps[0].message
        # The online monitor decides alike, point by point.
        m = Monitor()
        for step, value in enumerate(loss.tolist()):
            m.update(step, train_loss=value)
        assert [e.start_step for e in m.episodes() if e.code == "CS114"] == starts
    off = Config(params={"CS114": dataclasses.replace(RULES["CS114"].params(), climb=0)})
    assert "CS114" not in codes(analyze(train_loss=climbing, config=off))


def test_a_noisy_per_step_loss_rising_from_a_low_batch_to_an_outlier_is_no_climb():
    # A batch-64 classifier near convergence: its per-step loss wanders 0.01-0.2 around 0.04. One
    # low batch, an average one and an outlier (0.034, 0.074, 0.6: 1.5x and more each, 12x the
    # median) look like a climb that multiplied at every point, but the middle one is within the
    # loss's range (1.5x its median; `climb_from` 3x): the loss had been there often.
    rng = np.random.default_rng(11)
    loss = 0.04 * np.exp(0.7 * rng.standard_normal(300))
    loss[240] = 0.19
    loss[297:300] = [0.0343, 0.074, 0.6]
    batch, online = starts_both("CS114", train_loss=np.append(loss, 0.04))
    assert batch == online == []
    loose = Config(params={"CS114": dataclasses.replace(RULES["CS114"].default_params(), climb_from=0.0)})
    assert starts_both("CS114", loose, train_loss=np.append(loss, 0.04))[0] == [299]


def test_the_train_and_validation_losses_jumping_together_are_a_crash():
    # An epoch-level run (no grad norm): train loss 26x and validation loss 110x at epoch 19.
    rng = np.random.default_rng(5)
    train = np.concatenate([np.linspace(2.3, 1.6, 19) * (1 + 0.01 * rng.standard_normal(19)), [42.0, 450.0]])
    val = np.concatenate([np.linspace(2.2, 1.6, 19), [177.0, 800.0]])
    alone = val.copy()
    alone[19:] = 1.6  # the validation loss did not move: a bad batch (or a bad epoch's mean)
    for v, starts in ((val, [19]), (alone, [])):
        assert starts_both("CS117", train_loss=train, val_loss=v) == (starts, starts)  # the monitor alike
    message = episodes_of(analyze(train_loss=train, val_loss=val), "CS117")[0].message
    assert "validation loss 93.2x and train loss 21.2x" in message
    # The validation loss jumping alone is no crash either.
    assert "CS117" not in codes(analyze(train_loss=np.linspace(2.3, 1.6, 21), val_loss=val))


def test_an_epoch_whose_validation_loss_broke_while_its_mean_train_loss_only_began_to_is_a_crash():
    # A Keras transformer under negative weight decay: the epoch's mean train loss averages the
    # batches before the weights broke (2.8 -> 14.2, 5x), the validation loss, measured after them,
    # holds the break whole (2.6 -> 146, 55x). The next epoch, 194 and 442, only confirms it.
    train = np.array([2.36, 2.27, 2.27, 2.26, 2.26, 2.29, 2.33, 2.43, 2.45, 2.49, 2.57, 2.57, 2.76, 2.80,
                      14.2, 194.0, 842.0])
    val = np.array([2.27, 2.26, 2.26, 2.25, 2.29, 2.31, 2.42, 2.48, 2.41, 2.62, 2.52, 2.54, 2.80, 2.63,
                    146.0, 442.0, 2884.0])
    assert starts_both("CS117", train_loss=train, val_loss=val) == ([14], [14])  # the monitor alike
    # The train loss 2x (under `loss_factor`, 3): a validation set that changed, not weights that broke.
    halfway = train.copy()
    halfway[14:] = 5.6
    assert starts_both("CS117", train_loss=halfway, val_loss=val) == ([], [])
    # CS115 keeps 10x for the train loss beside the grad norm: per-step, both jump at the same update.
    jumped = Config(params={"CS117": dataclasses.replace(RULES["CS117"].default_params(), loss_factor=10.0)})
    assert starts_both("CS117", jumped, train_loss=train, val_loss=val)[0] == [15]
    assert RULES["CS115"].default_params().loss_factor == 10.0


def test_a_loss_that_jumps_right_after_the_learning_rate_did():
    # A scheduler restart multiplies the learning rate 50x; the loss doubles at the next point and
    # stays: a crash, at that point, though far under any 3x bar.
    rng = np.random.default_rng(4)
    loss = np.concatenate([1.2 * (1 + 0.03 * rng.standard_normal(60)), [2.46, 3.3, 2.3, 2.3, 2.3]])
    lr = np.concatenate([np.full(60, 3e-3), np.full(5, 0.15)])
    assert starts_both("CS114", train_loss=loss, lr=lr) == ([60], [60])  # the monitor alike
    # Without the jump, or with a loss that only bumps 1.2x, nothing.
    assert "CS114" not in codes(analyze(train_loss=loss, lr=np.full(65, 3e-3)))
    bump = np.concatenate([loss[:60], [1.45, 1.4, 1.3, 1.25, 1.2]])
    assert "CS114" not in codes(analyze(train_loss=bump, lr=lr))


def test_a_loss_that_jumps_100x_right_after_the_learning_rate_did_is_the_jumps_doing():
    # The loss learns 2.3 -> 1.2; one step at a 220x learning rate makes it jump 124x at the next
    # point, and it falls back over a dozen to 1.25x its best. Alone, a 100x jump the loss came back
    # from is a scare (a warning); right after the learning rate jumped it is the jump's doing,
    # however large: told so, and critical.
    rng = np.random.default_rng(5)
    t = np.arange(60)
    loss = np.concatenate([(1.2 + 1.1 * np.exp(-t / 8.0)) * (1 + 0.03 * rng.standard_normal(60)),
                           1.5 + 150 * np.exp(-np.arange(100) / 3.0)])
    lr = np.full(160, 0.05)
    lr[59] = 11.0
    assert starts_both("CS114", train_loss=loss, lr=lr) == ([60], [60])
    jump = episodes_of(analyze(train_loss=loss, lr=lr), "CS114")[0]
    assert "right after the learning rate jumped" in jump.message and jump.severity == "critical"
    alone = episodes_of(analyze(train_loss=loss), "CS114")[0]
    assert "in one point" in alone.message and alone.severity == "warning"


def test_a_warm_restart_makes_the_grad_norm_no_evidence_of_a_climb():
    import collections
    import types

    from tb_crash_signals.analysis.rules.loss_growth import _lr_restarted_at, _LrJump
    from tb_crash_signals.analysis.streaming import Series

    p = RULES["CS202"].params()
    t = np.arange(300)
    sgdr = 1e-3 * 0.5 * (1 + np.cos(np.pi * (t % 100) / 100)) + 1e-6  # restarts at 100, 200
    lr = Series(t, sgdr, np.zeros(300))
    at = _lr_restarted_at(lr, t, p)
    # From each restart while the learning rate is at least half the peak it jumped to.
    assert at[100:150].all() and not at[151:200].any() and at[200:250].all() and not at[:100].any()
    # The monitor's record of the last jump says the same, point by point.
    jump, channel = _LrJump(), types.SimpleNamespace(n=0, values=collections.deque(maxlen=256))
    online = []
    for i, v in enumerate(sgdr.tolist()):
        channel.n = i + 1
        channel.values.append(v)
        if i:
            jump.note(i, v, sgdr[i - 1], p)
        online.append(jump.restarted(channel, p))
    assert online == at.tolist()
    assert not _lr_restarted_at(lr, t, dataclasses.replace(p, lr_jump_back=0)).any()


def test_a_cyclic_rate_climbing_back_makes_the_grad_norm_no_evidence_of_a_climb():
    # A triangular cyclic schedule (50x from its floor to its peak, every 300 points) with the grad
    # norm following the rate; in the second cycle the loss climbs 1.4x towards the rate's peak,
    # from a best of 0.4 reached from 0.7 (so it soon loses more than `lost` of that progress).
    rng = np.random.default_rng(2)
    t = np.arange(600)
    phase = (t % 300) / 150.0
    tri = np.where(phase < 1, phase, 2 - phase)
    grad = (0.5 + 1.5 * tri) * np.exp(0.05 * rng.standard_normal(600))
    loss = np.where(t < 100, 0.7 - 0.003 * t, 0.4) * (1 + 0.4 * tri * (t >= 300))
    loss = loss * np.exp(0.1 * rng.standard_normal(600))
    cyclic = 1e-3 + 4.9e-2 * tri
    # Under a constant rate the grad norm's climb is evidence: critical at point 380.
    assert starts_both("CS202", train_loss=loss, grad_norm=grad, lr=np.full(600, 1e-2)) == ([380, 478], [380, 478])
    # Under the cycle it is the rate's doing: only the loss standing out of its noise alone counts.
    assert starts_both("CS202", train_loss=loss, grad_norm=grad, lr=cyclic) == ([478], [478])
    never = dataclasses.replace(RULES["CS202"].default_params(), lr_climb_back=0)
    cfg = dataclasses.replace(Config(), params={"CS202": never})
    assert starts_both("CS202", cfg, train_loss=loss, grad_norm=grad, lr=cyclic) == ([380, 478], [380, 478])


def test_a_jump_together_in_the_first_dozen_points_is_a_crash():
    # A far too large SGD step at the 7th logged point: loss and grad norm 15x together, before
    # the run's initial level (its first 10 points) is known.
    loss = np.array([1.2, 0.95, 0.8, 0.75, 0.7, 0.72, 11.0, 4.0, 3.5, 3.3, 3.2, 3.1, 3.0])
    grad = np.array([1.4, 1.2, 1.1, 1.0, 1.0, 1.1, 15.0, 6.0, 5.0, 4.0, 4.0, 3.5, 3.5])
    # A warm-up: the grad norm rises 5x in a few points while the loss falls.
    warm_loss = np.array([2.3, 1.9, 1.5, 1.2, 1.0, 0.9, 0.8, 0.75, 0.7, 0.68, 0.66, 0.65, 0.64])
    warm_grad = np.array([0.2, 0.3, 0.5, 0.8, 1.0, 1.0, 1.1, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9])
    # A learning rate far too large from the start: thrown off at the 3rd logged point (50x, 23x).
    early_loss = np.array([1.18, 0.80, 39.4, 1.77, 12.4, 1.17, 9.6, 25.0, 25.3, 55.6])
    early_grad = np.array([1.41, 3.84, 88.9, 2.75, 31.4, 0.37, 6.0, 9.9, 9.9, 954.0])
    cases = (((loss, grad), [6]), ((warm_loss, warm_grad), []), ((early_loss, early_grad), [2]))
    for (lv, gv), starts in cases:
        assert starts_both("CS115", train_loss=lv, grad_norm=gv) == (starts, starts)  # the monitor alike


def test_grad_norm_threshold_is_the_article_rule():
    g = healthy_grad(400)
    g[200:210] = 150.0
    eps = episodes_of(analyze(grad_norm=g), "CS101")
    assert len(eps) == 1
    assert (eps[0].start_step, eps[0].end_step) == (200, 209)
    g2 = healthy_grad(400)
    g2[200] = 100.0  # not strictly above
    assert "CS101" not in codes(analyze(grad_norm=g2))


def test_grad_norm_threshold_needs_growth_from_where_the_gradients_started():
    # Gradients that start near the threshold (a regression on unscaled targets) cross it
    # without exploding: within `headroom` (3x) of it, the relative rules judge them (a jump to 5x
    # is a grad-norm spike). From 20, 5x is over the threshold and an explosion.
    rng = np.random.default_rng(2)
    start = 80.0 * np.exp(0.12 * rng.standard_normal(400))
    start[:10] = 80.0
    assert (start > 100).sum() > 5
    assert "CS101" not in codes(analyze(grad_norm=start))
    g = start.copy()
    g[300:305] = 400.0
    assert "CS101" not in codes(analyze(grad_norm=g)) and "CS102" in codes(analyze(grad_norm=g))
    g = start / 4
    g[300:305] = 400.0
    assert starts_both("CS101", grad_norm=g) == ([300], [300])
    # The article's preset keeps its bare threshold.
    article = episodes_of(analyze(article_config(), grad_norm=start), "CS101")
    assert article and article[0].start_step == int(np.argmax(start > 100))


def test_a_heavy_tailed_grad_norms_lone_spike_over_the_threshold_is_no_explosion():
    # A normalizing flow's grad norm sits around 15 with a heavy tail: single batches reach 5-10x
    # that, now and then just over 100, and the next point is back (a spike: CS102 says so). A
    # grad norm that climbs to the threshold, stays over it, leaps 3x over it or multiplies 30x
    # in one update is an explosion at the point it crosses.
    rng = np.random.default_rng(4)
    base = 15.0 * np.exp(0.3 * rng.standard_normal(400))
    base[:10] = 5.0
    lone = base.copy()
    lone[299], lone[300] = 14.0, 113.0
    assert starts_both("CS101", grad_norm=lone) == ([], [])
    dipped = base.copy()
    dipped[297:301] = (15.0, 12.0, 1.4, 117.0)  # a low batch just before the spike: 84x it, 8x the level
    assert starts_both("CS101", grad_norm=dipped) == ([], [])
    assert 300 in [e.start_step for e in episodes_of(analyze(grad_norm=lone), "CS102")]
    twice = lone.copy()
    twice[301] = 140.0  # the next point stays over: the explosion is confirmed there
    climbing = base.copy()
    climbing[297:301] = (25.0, 40.0, 70.0, 120.0)
    leaping = base.copy()
    leaping[299], leaping[300] = 14.0, 320.0
    broken = base.copy()
    broken[297:301] = (2.0, 3.0, 2.5, 110.0)  # 37x the largest of the 3 points before, in one update
    for g, at in ((twice, 301), (climbing, 300), (leaping, 300), (broken, 300)):
        assert starts_both("CS101", grad_norm=g) == ([at], [at])
    # The article's preset keeps its bare threshold.
    article = episodes_of(analyze(article_config(), grad_norm=lone), "CS101")
    assert [e.start_step for e in article] == [300]


@pytest.mark.parametrize("code", ["CS112", "CS114", "CS115"])
def test_a_loss_that_crosses_zero_has_no_ratio_to_its_recent_median(code):
    # A negative log-likelihood (a heteroscedastic Gaussian, a flow) falls through zero and wanders
    # around it: its recent median can be 0.0006 while single batches reach 0.2, "325x its median".
    # A window holding a point under zero gives no ratio; the same jumps on a positive loss do.
    rng = np.random.default_rng(5)
    n = 400
    loss = np.concatenate([np.linspace(1.1, 0.3, 150), 0.3 * np.exp(0.05 * rng.standard_normal(100)),
                           0.05 * rng.standard_normal(n - 250)])
    loss[250:] += 0.003 - np.median(loss[250:300])  # through zero: the median before step 300 is 0.003
    loss[300] = 0.6
    grad = np.full(n, 1.0) * np.exp(0.1 * rng.standard_normal(n))
    grad[300] = 30.0
    assert starts_both(code, train_loss=loss, grad_norm=grad) == ([], [])
    shifted = loss + 0.5  # the same series over zero: 1.1 on a median of 0.5 is no blow-up
    shifted[300] = 80.0  # ... 160x is
    batch, monitor = starts_both(code, train_loss=shifted, grad_norm=grad)
    assert 300 in batch and batch == monitor
    # A hinge loss is 0 on the batches it separates: zero is its floor, not a crossing.
    hinge = np.where(rng.random(n) < 0.3, 0.0, shifted)
    hinge[300] = 80.0
    batch, monitor = starts_both(code, train_loss=hinge, grad_norm=grad)
    assert 300 in batch and batch == monitor


def test_grad_norm_threshold_leaves_gradients_that_start_above_it_to_the_relative_rules():
    # A loss summed over the batch (a VAE's ELBO): the grad norm starts at ~570 and wanders 2x around
    # it. Nor is a first point over the threshold an explosion: it has no start to have risen from.
    rng = np.random.default_rng(5)
    summed = 500.0 * np.exp(0.25 * rng.standard_normal(800))
    summed[0] = 570.0
    assert starts_both("CS101", grad_norm=summed) == ([], [])
    assert starts_both("CS101", grad_norm=np.concatenate([[150.0], healthy_grad(300)])) == ([], [])
    # The article's preset: from the first point, whatever the start.
    article = episodes_of(analyze(article_config(), grad_norm=summed), "CS101")
    assert article and article[0].start_step == 0


def test_grad_norm_spike_fires_on_one_outlier_only():
    g = healthy_grad(600)
    g[450] *= 20
    eps = episodes_of(analyze(grad_norm=g), "CS102")
    assert [e.start_step for e in eps] == [450]
    assert "CS102" not in codes(analyze(grad_norm=healthy_grad(600)))


def test_a_grad_norm_spike_under_a_loss_learnt_two_decades_down_is_left_to_the_loss():
    # An easy task: the loss falls from 1.4 to ~1e-4 and the grad norm with it; one batch's gradient
    # then jumps 20x without moving the loss. Under a loss still at a fifth of its start the same
    # spike is one; scan and the monitor alike, and with `learnt` 0 both fire.
    t = np.arange(600)
    rng = np.random.default_rng(0)
    g = healthy_grad(600) * (np.exp(-t / 30) + 0.01)
    g[450] *= 20
    near_zero = 1.4 * np.exp(-t / 50) * (1 + 0.05 * rng.standard_normal(600)) + 1e-4
    learning = 1.4 * (0.2 + 0.8 * np.exp(-t / 50)) * (1 + 0.05 * rng.standard_normal(600))
    assert starts_both("CS102", grad_norm=g, train_loss=near_zero) == ([], [])
    assert starts_both("CS102", grad_norm=g, train_loss=learning) == ([450], [450])
    assert starts_both("CS102", grad_norm=g) == ([450], [450])  # no loss to read
    off = Config(params={"CS102": dataclasses.replace(RULES["CS102"].default_params(), learnt=0.0)})
    assert starts_both("CS102", off, grad_norm=g, train_loss=near_zero) == ([450], [450])


def test_loss_jump_compares_with_the_previous_value_when_selected():
    loss = np.full(50, 1.0)
    loss[30] = 3.5
    article = Config(select=("CS111",))
    eps = episodes_of(analyze(article, train_loss=loss), "CS111")
    assert [e.start_step for e in eps] == [30]
    assert "CS111" not in codes(analyze(train_loss=loss))  # opt-in: not a default rule
    loss[30] = 2.9
    assert "CS111" not in codes(analyze(article, train_loss=loss))


def test_loss_spike_is_robust_and_classifies_recovery():
    loss = healthy_loss(1000)
    loss[700] *= 4
    eps = episodes_of(analyze(train_loss=loss), "CS112")
    assert [e.start_step for e in eps] == [700]
    assert "fast recovery" in eps[0].message
    assert "CS112" not in codes(analyze(train_loss=healthy_loss(1000)))


def test_a_loss_spike_must_throw_back_a_share_of_what_the_run_learnt():
    # A batch-8 regression at its noise floor: its MSE fell from 1.0 to ~0.015, and single batches
    # reach 7x that median (0.1): far out of their local range, yet a tenth of what the run learnt.
    # A batch that throws it back to 0.4, two fifths of the way to its start, is a spike.
    t = np.arange(1500)
    loss = (0.015 + np.exp(-t / 60.0)) * np.exp(0.25 * np.random.default_rng(5).standard_normal(1500))
    for i in (700, 950, 1200):
        loss[i] = 0.1
    assert starts_both("CS112", train_loss=loss) == ([], [])
    loss[1400] = 0.4
    batch, online = starts_both("CS112", train_loss=loss)
    assert batch == online == [1400]
    # The condition is `min_undo`'s: without it the batches at the floor are spikes too.
    every = Config(params={"CS112": dataclasses.replace(RULES["CS112"].default_params(), min_undo=0.0)})
    assert starts_both("CS112", every, train_loss=loss)[0] == [700, 950, 1200, 1400]


def test_loss_divergence_needs_the_progress_lost_and_kept_lost():
    loss = healthy_loss(800)
    loss[600:] = 3.0  # back above where it started, and staying there
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    # The level (median of 9) is elevated from the 5th point on; the 5th elevated point in a row fires.
    assert eps and eps[0].start_step == 608
    assert "lost what it had learnt" in eps[0].message
    short = healthy_loss(800)
    short[600:603] *= 5  # three points: a spike, not a divergence
    assert "CS113" not in codes(analyze(train_loss=short))
    small = healthy_loss(800)
    small[600:] *= 1.5  # worse, but most of the progress kept
    assert "CS113" not in codes(analyze(train_loss=small))


def test_a_classifier_drifting_back_toward_chance_has_diverged_before_doubling_its_best():
    # Learns 2.3 -> ~1.6 (under 0.75x its initial level), then drifts back to 2.1 and stays: it
    # lost 70 % of what it learnt, yet never reaches 2x its best.
    rng = np.random.default_rng(2)
    t = np.arange(800)
    loss = np.where(t < 200, 2.3 - 0.7 * t / 200, np.minimum(1.6 + 0.5 * (t - 200) / 200, 2.1))
    loss = loss * (1 + 0.02 * rng.standard_normal(800))
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    # Half the progress is lost once the level passes 1.95 (step ~350); five points in a row fire.
    assert eps and 340 < eps[0].start_step < 380, [(e.start_step, e.end_step) for e in eps]
    m = Monitor()
    for step, v in enumerate(loss.tolist()):
        m.update(step, train_loss=v)
    assert [e.start_step for e in m.episodes() if e.code == "CS113"] == [eps[0].start_step]
    # A run that learnt little (best over 0.75x its start) is judged at 2x its best only.
    little = np.where(t < 200, 2.3 - 0.4 * t / 200, np.minimum(1.9 + 0.3 * (t - 200) / 200, 2.2))
    little = little * (1 + 0.02 * rng.standard_normal(800))
    assert "CS113" not in codes(analyze(train_loss=little))
    strict = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), learnt=0.5)})
    assert "CS113" not in codes(analyze(strict, train_loss=loss))


def test_a_best_level_is_a_median_of_ten_points_at_least():
    # A noisy per-step loss that never learns: it hovers at ~2 (batch noise of +-40 %) from a first
    # point that happened to be 1.0. The median of that one point is no level the run reached: it
    # has not "learnt" to 1.0, so it has lost nothing, and its loss is not climbing away from it.
    rng = np.random.default_rng(11)
    loss = 2.0 * np.exp(0.3 * rng.standard_normal(300))
    loss[0] = 1.0
    for code in ("CS113", "CS202"):
        batch, monitor = starts_both(code, train_loss=loss)
        assert batch == monitor == [], (code, batch, monitor)
    # From its 10th point on a median is a level: a run that learnt to 1.0 in its first 20 points
    # and went back to 2 has diverged.
    learnt = loss.copy()
    learnt[:20] = 1.0 * np.exp(0.05 * rng.standard_normal(20))
    batch, monitor = starts_both("CS113", train_loss=learnt)
    assert batch == monitor and batch, (batch, monitor)


def test_a_level_within_the_noise_of_a_small_batch_loss_has_lost_nothing():
    # A per-step loss with +-80 % minibatch noise that learns and keeps learning: its median of 9
    # wanders above half the progress from its lowest 31-point median, within 2 noise units.
    rng = np.random.default_rng(4)
    t = np.arange(1500)
    loss = (1.0 * np.exp(-t / 300) + 0.1) * np.exp(0.6 * rng.standard_normal(1500))
    batch, monitor = starts_both("CS113", train_loss=loss)
    assert batch == monitor == []
    # Blind to the noise (neither the level's distance from the best nor the fall the run made is
    # asked to stand out of it, nor the level above the points of its best), the rule fires.
    blind = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), z=0.0, learnt_z=0.0,
                                                         above_best=0)})
    batch, monitor = starts_both("CS113", blind, train_loss=loss)
    assert batch == monitor and batch, (batch, monitor)


def mixup_losses(n=3000, seed=0, jump_at=None):
    """A per-step loss under mixup: each batch's inputs mixed by a weight drawn from Beta(0.4, 0.4),
    most near 0 or 1 (a clean batch) and a third near the middle, which costs up to 1.3 more once
    the network has learnt (at chance, 2.3, mixing costs nothing). With `jump_at`, every batch
    costs 5x from there on."""
    rng = np.random.default_rng(seed)
    learnt = 1.0 - np.exp(-np.arange(n) / 300)
    clean = (2.3 - 2.0 * learnt) * np.exp(0.15 * rng.standard_normal(n))
    mix = rng.beta(0.4, 0.4, n)
    loss = clean + 1.3 * 4 * mix * (1 - mix) * learnt
    if jump_at is not None:
        loss[jump_at:] *= 5.0
    return loss


def test_mixups_two_populations_of_batches_have_lost_nothing():
    # The median of 9 flips to the mixed batches by chance, 2-3x a best level set by a stretch of
    # mostly clean ones; the level stands among the mixed batches of that stretch, not above them.
    off = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), above_best=0)})
    flagged = 0
    for seed in range(4):
        loss = mixup_losses(seed=seed)
        assert starts_both("CS113", train_loss=loss) == ([], []), seed
        batch, monitor = starts_both("CS113", off, train_loss=loss)
        assert batch == monitor
        flagged += bool(batch)
    assert flagged >= 3
    # Every batch 5x from step 2000 on: the level stands above all the points of its best.
    batch, monitor = starts_both("CS113", train_loss=mixup_losses(seed=0, jump_at=2000))
    assert batch == monitor and batch and 2000 <= batch[0] <= 2010, batch


def test_mixup_logged_every_50_steps_stands_among_its_own_points():
    # Each point one batch (Lightning's default cadence): two mixed batches in a row make a 3-point
    # median 2-4x the lowest 5-point median, a level a fifth of the points since the run learnt
    # already stood at. Back at chance from step 2000 on, the level climbs over all of them.
    steps = np.arange(49, 3000, 50)
    off = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), within=1.0)})
    flagged = {True: 0, False: 0}
    for seed in range(12):
        data = {"train_loss": series(mixup_losses(seed=seed)[49::50], steps)}
        for gated, config in ((True, None), (False, off)):
            batch, monitor = starts_both_at("CS118", data, config)
            assert batch == monitor, seed
            flagged[gated] += bool(batch)
    assert flagged[True] <= 3 and flagged[False] >= 10, flagged
    # (Seed 0's synthetic batches spread half a decade between quartiles: the noise gate holds it;
    # seed 3's climbed at 1899, an episode the divergence continues.)
    for seed in (1, 2, 4, 5, 6, 7):
        loss = mixup_losses(seed=seed)
        loss[2000:] = 2.3 * np.exp(0.05 * np.random.default_rng(100 + seed).standard_normal(1000))
        batch, monitor = starts_both_at("CS118", {"train_loss": series(loss[49::50], steps)})
        assert batch == monitor and [s for s in batch if 2000 <= s <= 2149], (seed, batch)


def test_a_short_run_that_jumps_back_to_chance_and_stays_has_diverged():
    # 40 epoch means: the loss learns from 2.1 to 0.6, then jumps back to 2.3 (its chance level,
    # 3.8x its best) and stays. Past `min_points` the quartiles of the last points span the fall and
    # the jump, decades apart, but their point-to-point noise (the jitter) is a few percent: the run's
    # trend, not a tiny batch's noise, so the noise gate does not hold (`trend_noise`). Read from the
    # quartiles alone, the rule stays quiet until the level is `far` (4x) its best: never, here.
    t = np.arange(40)
    off = dataclasses.replace(RULES["CS113"].default_params(), trend_noise=0.0)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        loss = np.where(t < 26, 0.6 + 1.5 * np.exp(-t / 4.0), 2.3) * (1 + 0.03 * rng.standard_normal(40))
        assert starts_both("CS113", train_loss=loss) == ([34], [34])
        assert starts_both("CS113", dataclasses.replace(Config(), params={"CS113": off}), train_loss=loss) == ([], [])


def test_a_divergence_bouncing_around_its_level_is_one_episode():
    loss = healthy_loss(1200)
    rng = np.random.default_rng(5)
    # Lost, then bouncing around 2x its best level (under and over the firing level) for good.
    loss[600:] = 1.4 + 0.4 * np.sign(np.sin(np.arange(600) / 9.0)) + 0.01 * rng.standard_normal(600)
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    assert len(eps) == 1 and eps[0].end_step == 1199, [(e.start_step, e.end_step) for e in eps]
    back = healthy_loss(1200)
    back[600:700] = 3.0  # diverged, then recovered to where it was
    eps = episodes_of(analyze(train_loss=back), "CS113")
    assert len(eps) == 1 and eps[0].end_step < 720


def test_a_climb_with_the_grad_norm_and_no_learning_rate_logged():
    # The rule reads the learning rate's last jump: a run that logs no learning rate has none.
    rng = np.random.default_rng(6)
    t = np.arange(400)
    loss = np.where(t < 250, 2.0 * np.exp(-t / 60) + 0.3, 0.3 * 1.01 ** (t - 250))
    loss *= 1 + 0.02 * rng.standard_normal(400)
    grad = np.where(t < 230, 1.0, 1.02 ** (t - 230)) * np.exp(0.05 * rng.standard_normal(400))
    eps = episodes_of(analyze(train_loss=loss, grad_norm=grad), "CS202")
    assert eps and "with the grad norm" in eps[0].message
    batch, online = starts_both("CS202", train_loss=loss, grad_norm=grad)
    assert online == batch == [e.start_step for e in eps]


def test_an_epoch_level_climb_is_not_read_as_noise():
    # 45 epochs under an exponential learning rate: learns, then climbs 50x in a dozen epochs.
    loss = np.array([2.9, 2.85, 2.8, 2.75, 2.7, 2.65, 2.6, 2.55, 2.5, 2.45, 2.4, 2.4, 2.4, 2.4, 2.4,
                     2.39, 2.26, 2.13, 1.96, 1.81, 1.71, 1.72, 1.67, 1.67, 1.66, 1.69, 1.74, 1.75, 1.75,
                     1.85, 1.95, 2.04, 2.51, 4.68, 17.8, 30.3, 33.1, 37.0, 44.9, 44.4, 53.0, 54.0, 66.9,
                     82.1, 92.1])
    # The climb fills the noise window's upper quartile within a few points: the noise that
    # counts is the one before it.
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    assert [e.start_step for e in eps] == [41]
    assert "CS113" not in codes(analyze(train_loss=loss[:35]))


def test_a_short_smooth_run_can_diverge_before_its_31st_point():
    # 30 epochs of a Keras run under an exponential learning rate: learns, then climbs 50x.
    loss = np.array([2.39, 2.26, 2.13, 1.96, 1.81, 1.71, 1.72, 1.67, 1.67, 1.66, 1.69, 1.74, 1.75, 1.75,
                     1.85, 1.95, 2.04, 2.51, 4.68, 17.8, 30.3, 33.1, 37.0, 44.9, 44.4, 53.0, 54.0, 66.9,
                     82.1, 92.1])
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    # The level (median of 9) is 2.7x the best at point 22; the fifth such point fires.
    assert [e.start_step for e in eps] == [26]
    # Without the early allowance the run is too short to be told.
    late = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), early_points=31)})
    assert "CS113" not in codes(analyze(late, train_loss=loss))
    # The same climb after 20 points of tiny-batch noise is not judged before the 31st point by
    # the early gate; it is once the level is `far` (4x) over its best and above its start.
    rng = np.random.default_rng(3)
    noisy = loss.copy()
    noisy[:18] *= np.exp(0.5 * rng.standard_normal(18))
    near = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), far=0.0)})
    assert "CS113" not in codes(analyze(near, train_loss=noisy))
    assert [e.start_step for e in episodes_of(analyze(train_loss=noisy), "CS113")] == [27]


def test_a_loss_climbing_away_from_its_start_diverged_however_noisy_its_quartiles():
    # A transformer whose step is far too large from the first: the loss climbs from 2.6 to ~100
    # in 40 steps, ~1.35x apart from step to step. The climb spreads the quartiles the noise gate reads
    # (0.55-0.7 decades over 50 points), yet its points jitter around their trend like a
    # healthy per-step loss (~0.2).
    rng = np.random.default_rng(7)
    t = np.arange(200)
    loss = 2.6 * np.exp(np.minimum(t, 40) / 11.0) * np.exp(0.3 * rng.standard_normal(200))
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    # Read from the quartiles alone (neither `far` nor `trend_noise`), the gate holds it back.
    near = Config(params={"CS113": dataclasses.replace(RULES["CS113"].default_params(), far=0.0, trend_noise=0.0)})
    late = episodes_of(analyze(near, train_loss=loss), "CS113")
    assert eps and eps[0].start_step < 31 and (not late or late[0].start_step > eps[0].start_step + 10)
    batch, online = starts_both("CS113", train_loss=loss)
    assert online == batch == [e.start_step for e in eps]
    # Tiny-batch noise spanning decades around a level above its start: its medians wander 4x
    # over their lowest, and it jitters far more than `far_jitter`.
    noisy = 0.3 * np.exp(2.0 * rng.standard_normal(3000))
    assert "CS113" not in codes(analyze(train_loss=noisy))


def test_a_short_run_a_little_noisier_than_smooth_is_judged_with_its_noise_counted_more():
    # 30 epochs of a Keras CNN under an exponential learning rate: learns to 0.63 by epoch 18,
    # bumps between 0.63 and 0.80 (jitter ~0.06, over early_jitter 0.05), then climbs; its
    # sustained crash (2x its best) is at epoch 28.
    loss = np.array([2.29, 2.144, 1.651, 1.367, 1.236, 1.144, 0.9895, 0.8641, 0.776, 0.7886, 0.7339,
                     0.7964, 0.6587, 0.6425, 0.6432, 0.6406, 0.7307, 0.6573, 0.6319, 0.7519, 0.7467,
                     0.7412, 0.6944, 0.7721, 0.8448, 0.7747, 0.9109, 1.107, 1.561, 1.678])
    lr = 0.001044 * 1.168 ** np.arange(loss.size)
    eps = episodes_of(analyze(train_loss=loss, lr=lr), "CS202")
    assert len(eps) == 1 and 20 < eps[0].start_step <= 28 and eps[0].severity == "critical"
    m = Monitor()
    for step, (a, b) in enumerate(zip(loss.tolist(), lr.tolist())):
        m.update(step, lr=b, train_loss=a)
    assert [e.start_step for e in m.episodes() if e.code == "CS202"] == [eps[0].start_step]
    # Not judged at all before the 31st point with early_noisy and early_learnt 0 (the gate's earlier form).
    off = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), early_noisy=0.0,
                                                      early_learnt=0.0)})
    assert "CS202" not in codes(analyze(off, train_loss=loss, lr=lr))


def test_a_smooth_loss_that_doubles_and_stays_needs_three_points_not_ten():
    # Epoch means of a Keras CNN whose loss scale grows unchecked: learns to 0.89, then 2.1x in one
    # epoch, and stays there (its crash, 2x its best for good, is epoch 26); NaN-scale at epoch 28.
    loss = np.array([2.309, 2.308, 2.297, 2.29, 2.286, 2.273, 2.251, 2.227, 2.146, 1.907, 1.558, 1.407,
                     1.358, 1.219, 1.194, 1.192, 1.164, 1.005, 0.923, 0.936, 1.361, 0.956, 0.888, 1.87,
                     2.22, 2.079, 2.011, 2.443])
    eps = episodes_of(analyze(train_loss=loss), "CS202")
    # Its fast level (median of 3) climbs from epoch 24; the third climbing epoch fires.
    assert [e.start_step for e in eps] == [26] and eps[0].severity == "critical"
    m = Monitor()
    for step, v in enumerate(loss.tolist()):
        m.update(step, train_loss=v)
    assert [e.start_step for e in m.episodes() if e.code == "CS202"] == [26]
    # A per-step loss a little too noisy to be smooth, stepping up ~3x (a third of its fall from 2.3
    # lost), needs `consecutive_alone`.
    rng = np.random.default_rng(0)
    climb = np.full(30, 1.0) * (1 + 0.06 * rng.standard_normal(30))
    noisy = np.concatenate([healthy_loss(400, noise=0.06), climb])
    eps = episodes_of(analyze(train_loss=noisy), "CS202")
    assert eps and eps[0].start_step >= 400 + RULES["CS202"].default_params().consecutive_alone - 1


def test_a_divergence_that_begins_in_noise_fires_once_the_noise_is_gone():
    rng = np.random.default_rng(4)
    t = np.arange(300)
    noisy = (2.3 * np.exp(-t / 60) + 0.1) * np.exp(1.2 * rng.standard_normal(300))  # tiny batches
    loss = np.concatenate([noisy, np.full(300, 2.0)])  # then stuck far above its best, calmly
    eps = episodes_of(analyze(train_loss=loss), "CS113")
    assert len(eps) == 1 and 320 < eps[0].start_step < 500, [(e.start_step, e.end_step) for e in eps]
    assert "CS113" not in codes(analyze(train_loss=noisy))


def _range_test(n=60):
    """An averaged loss (HuggingFace logs the mean over its logging interval: smooth) under a
    learning-rate range test: it learns, then climbs as the learning rate keeps rising."""
    t = np.arange(n)
    lr = 1e-3 * 1.2 ** t
    loss = 1.55 + 0.85 * np.exp(-t / 12.0)
    loss[44:] *= np.exp(0.045 * (t[44:] - 44) ** 1.5 / 3.0)
    return t, lr, loss


def test_a_smooth_climb_is_told_on_the_fast_level():
    t, lr, loss = _range_test()
    crash = int(np.argmax(loss > 2 * loss.min()))  # where the loss has lost twice its best
    result = analyze(train_loss=loss, lr=lr)
    eps = episodes_of(result, "CS202")
    assert eps and eps[0].severity == "critical" and eps[0].start_step <= crash - 3, (eps, crash)
    assert "with the learning rate still rising" in eps[0].message
    # The same climb under tiny-batch noise (a jitter far over twice `early_jitter`) is judged on
    # the 7-point level: later.
    later = []
    for seed in range(4):
        noisy = loss * np.exp(0.3 * np.random.default_rng(seed).standard_normal(loss.size))
        found = episodes_of(analyze(train_loss=noisy, lr=lr), "CS202")
        later.append(found[0].start_step if found else loss.size)
    assert np.median(later) > eps[0].start_step, later
    monitor = Monitor()
    for step in t.tolist():
        monitor.update(step, lr=float(lr[step]), train_loss=float(loss[step]))
    assert [(e.start_step, e.message) for e in monitor.episodes() if e.code == "CS202"] == [
        (e.start_step, e.message) for e in eps]


def test_a_short_run_a_little_noisier_climbing_with_the_learning_rate_is_told_on_the_fast_level():
    # 30 epoch means under an exponential learning rate: the loss learns, then climbs as the rate
    # keeps rising. With a jitter between `early_jitter` and twice it (a small dataset's epochs),
    # the fast level tells the climb (its jitter taken `early_noisy` x) before the loss is twice
    # its best; the 7-point level would tell it a point or more after.
    t = np.arange(30)
    lr = 1e-3 * 1.25 ** t
    loss = 0.6 + 1.7 * np.exp(-t / 3.0)
    loss[14:] *= np.exp(0.03 * (t[14:] - 14) ** 1.5)
    low = int(np.argmin(loss))
    crash = low + int(np.argmax(loss[low:] > 2 * loss.min()))
    for sigma, seed in ((0.06, 2), (0.06, 3), (0.1, 0), (0.1, 1)):
        noisy = loss * np.exp(sigma * np.random.default_rng(seed).standard_normal(loss.size))
        assert 0.05 <= stats.jitter(noisy[:20]) < 0.1  # (the points before the climb)
        eps = episodes_of(analyze(train_loss=noisy, lr=lr), "CS202")
        assert eps and eps[0].start_step < crash, (sigma, seed, eps, crash)
        assert "with the learning rate still rising" in eps[0].message
        monitor = Monitor()
        for step in t.tolist():
            monitor.update(step, lr=float(lr[step]), train_loss=float(noisy[step]))
        assert [(e.start_step, e.message) for e in monitor.episodes() if e.code == "CS202"] == [
            (e.start_step, e.message) for e in eps]
        # Without the learning rate, nothing corroborates the climb: the 7-point level, alone.
        alone = episodes_of(analyze(train_loss=noisy), "CS202")
        assert not alone or alone[0].start_step > eps[0].start_step


def test_a_restart_of_the_learning_rate_is_no_divergence():
    # SGDR: the learning rate jumps back to its peak every 40 points and the smooth loss bumps up
    # 30 % at each restart, then falls again. The learning rate rises only at the jump itself
    # (counted as rising for the 10 points after it, the bump is a 3-point climb of the fast level).
    t = np.arange(300)
    phase = t % 40
    lr = 1e-3 * (1 + np.cos(np.pi * phase / 40)) / 2 + 1e-6
    loss = (0.4 + 2.0 * np.exp(-t / 100)) * (1 + 0.3 * np.exp(-phase / 6.0) * (t >= 40))
    assert not [e for e in analyze(train_loss=loss, lr=lr).episodes if e.severity == "critical"]


def test_loss_climbing_with_the_learning_rate_needs_the_rate_at_a_new_high():
    # The loss climbs 1.25x its best while the learning rate climbs 1.2x over 10 points. Under a
    # rate rising to ever new highs (a schedule gone wrong) that is a divergence under way; under
    # a triangular cyclic schedule climbing back to the peak the run already trained at, it is not.
    n = 300
    t = np.arange(n)
    rng = np.random.default_rng(2)
    loss = np.where(t < 100, 2.0 - t / 100, 1.0) * np.where(t >= 225, 1 + 0.25 * np.minimum(t - 225, 20) / 20, 1.0)
    loss = loss * (1 + 0.01 * rng.standard_normal(n))
    exponential = 0.01 * 1.02**t
    cyclic = np.where(t % 200 < 100, 0.01 + 0.99 * (t % 100) / 100, 1.0 - 0.99 * (t % 100) / 100)
    batch, online = starts_both("CS202", train_loss=loss, lr=exponential)
    assert batch == online and batch and 225 < batch[0] < 245
    assert starts_both("CS202", train_loss=loss, lr=cyclic) == ([], [])


def test_a_loss_climbing_as_the_learning_rate_keeps_rising_past_where_it_learnt_best():
    # An exponential learning rate rising 0.9 % a point (1.09x over 10 points: under `lr_up`) while
    # the loss, flat at its best since point 150, climbs 30 % from point 280. Once the rate is 1.5x
    # its value where the best level last fell, the climb is told with it, at 1.1x the best.
    n = 420
    t = np.arange(n)
    lr = 1e-3 * 1.009**t
    loss = np.where(t < 150, 2.0 - t / 150, 1.0) * (1 + 0.3 * np.clip((t - 280) / 80, 0, 1))
    loss = loss * (1 + 0.02 * np.random.default_rng(3).standard_normal(n))
    batch, online = starts_both("CS202", train_loss=loss, lr=lr)
    assert batch == online and batch and 280 < batch[0] < 330, batch
    assert "with the learning rate still rising" in episodes_of(analyze(train_loss=loss, lr=lr), "CS202")[0].message
    # Without it the climb must reach `ratio` (1.3x) on its own.
    alone = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), lr_since_best=0.0)})
    later, _ = starts_both("CS202", alone, train_loss=loss, lr=lr)
    assert not later or later[0] > batch[0] + 20, (batch, later)


def test_a_loss_a_little_over_its_best_during_a_linear_warm_up_is_no_divergence():
    # The loss, flat at its best from point 150, drifts 15 % up from point 300: over `ratio_with_lr`
    # (1.1), under `ratio_with_grad` (1.25). Under an exponential rate (ever faster) that is a climb
    # with the rate; under a linear warm-up, which rises as fast as it did to the peak its schedule
    # set, the rise holds the grad norm's bars (`lr_faster`), and the loss stays under them.
    n = 460
    t = np.arange(n)
    loss = np.where(t < 150, 2.0 - t / 150, 1.0) * (1 + 0.15 * np.clip((t - 300) / 60, 0, 1))
    loss = loss * (1 + 0.02 * np.random.default_rng(3).standard_normal(n))
    linear, exponential = 1e-4 * (t + 1), 1e-3 * 1.009**t
    batch, online = starts_both("CS202", train_loss=loss, lr=exponential)
    assert batch == online and batch and 300 < batch[0] < 360, batch
    assert starts_both("CS202", train_loss=loss, lr=linear) == ([], [])
    every_rise = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), lr_faster=0.0)})
    batch, online = starts_both("CS202", every_rise, train_loss=loss, lr=linear)
    assert batch == online and batch, batch
    # A best level that last fell at the 10th point, before `lr_back` points of rate: its rise a
    # point is read over the points there are, and a linear rate from 0 is as steady then as later.
    loss = np.where(t < 3, 2.0 - t / 3, 1.0) * (1 + 0.15 * np.clip((t - 60) / 30, 0, 1))
    assert starts_both("CS202", train_loss=loss[:120], lr=linear[:120]) == ([], [])
    batch, online = starts_both("CS202", every_rise, train_loss=loss[:120], lr=linear[:120])
    assert batch == online and batch, batch


def test_a_steady_learning_rate_rise_holds_the_grad_norms_bars():
    # A level 1.38x its best, 3.25 noise units above it: over `z_with_lr`, under `z_with_grad`.
    p = RULES["CS202"].default_params()
    spread = 0.1 * math.sqrt(p.smooth) / 1.25
    level = math.exp(0.325)

    def decide(lr_rising):
        return climbing(level, 1.2, math.nan, math.nan, 1.0, 2.0, spread, 0.0, False, lr_rising, p)

    assert decide(FASTER) == "with grad" and decide(True) == "with grad"
    assert decide(STEADY) is False


def test_a_climb_under_a_rising_learning_rate_has_its_own_noise_bar():
    # A level 1.38x its best, 3.25 noise units above it (the 7-point level's noise 0.1 in log units):
    # with the learning rate still rising, a climb (over `z_with_lr`, 3.0); with the grad norm
    # climbing instead, under its 3.5 units; alone, under `z` (4). A noisy loss climbing as its rate
    # keeps rising (a CNN logged every 10 steps under an exponential rate) is told that much sooner.
    p = RULES["CS202"].default_params()
    assert p.z_with_lr < 3.25 < p.z_with_grad < p.z
    spread = 0.1 * math.sqrt(p.smooth) / 1.25
    level, best = math.exp(0.325), 1.0

    def decide(grad_rising, lr_rising, params=p):
        return climbing(level, 1.2, math.nan, math.nan, best, 2.0, spread, 0.0, grad_rising, lr_rising, params)

    assert decide(False, True) == "with grad"
    assert decide(True, False) is False and decide(False, False) is False
    assert decide(False, True, dataclasses.replace(p, z_with_lr=p.z_with_grad)) is False


def test_a_climb_under_a_rising_learning_rate_counts_the_decades_the_loss_had_fallen():
    # A regression loss fell from 1.0 to 0.03 (1.5 decades); at 2.7x its best it has lost 5 % of
    # that fall, under `lost_with_lr` (10 %) and `lost` (30 %), but 28 % of its decades, over
    # `lost_decades` (20 %): with the learning rate still rising (a warm-up that overshoots) it
    # climbs; with the grad norm alone (a converged classifier's per-step loss bumps that far) it
    # does not.
    p = RULES["CS202"].default_params()
    level, best, init = 0.08, 0.03, 1.0
    assert level - best < p.lost * (init - best)
    assert math.log(level / best) >= p.lost_decades * math.log(init / best)

    def decide(grad_rising, lr_rising, params=p):
        return climbing(level, 0.07, math.nan, math.nan, best, init, 0.01, 0.0, grad_rising, lr_rising, params)

    assert decide(False, True) == "with grad"
    assert decide(True, False) is False
    assert decide(False, True, dataclasses.replace(p, lost_decades=0.0)) is False


def test_a_climb_that_lost_little_of_the_progress_needs_an_ever_faster_rate():
    # A classifier's loss fell from 1.0 to its best 0.28 and stands 1.26x over it, with the grad
    # norm climbing: 10 % of its progress lost, 18 % of its decades. At a warm-up's peak (the rate
    # rising steadily, or the grad norm alone) a loss bumps 2-4x its best and comes back: under
    # `lost` (30 %) that is no divergence yet. Under a rate that climbs ever faster (an exponential
    # rate, a quadratic ramp) it is, from `lost_with_lr` (10 %) on.
    p = RULES["CS202"].default_params()
    level, best, init = 0.353, 0.28, 1.0
    assert p.lost_with_lr * (init - best) <= level - best < p.lost * (init - best)
    assert math.log(level / best) < p.lost_decades * math.log(init / best)

    def decide(grad_rising, lr_rising, params=p):
        return climbing(level, 0.3, math.nan, math.nan, best, init, 0.0, 0.0, grad_rising, lr_rising, params)

    assert decide(True, FASTER) == "with grad" and decide(True, True) == "with grad"
    assert decide(True, STEADY) is False and decide(True, False) is False
    assert decide(True, False, dataclasses.replace(p, lost=p.lost_with_lr)) == "with grad"
    assert decide(True, FASTER, dataclasses.replace(p, lost_with_lr=p.lost)) is False


def test_a_noisy_loss_that_learnt_then_climbs_as_its_warm_up_ramps_is_told_before_min_points():
    # A per-step loss (noise 0.3 in log units: too noisy for the early smooth paths) falls from 1.0
    # to 0.03 in its first 6 points and climbs 30 % a point from point 16 while the learning rate
    # ramps: the first 31 points of a run logged every 10 steps. With the rate rising and the level
    # fallen under `early_learnt` x its highest, it is judged before `min_points`, its noise gate the
    # decades its points span; without `early_learnt`, only from point 31.
    t = np.arange(60)
    lr = 1e-3 * (1 + t)
    climb = np.where(t < 16, 1.0, 1.3 ** (t - 16.0))
    off = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), early_learnt=0.0)})
    p = RULES["CS202"].default_params()
    for seed in range(4):
        noise = np.exp(0.3 * np.random.default_rng(seed).standard_normal(60))
        loss = np.maximum(np.exp(-t / 1.5), 0.03) * climb * noise
        assert stats.jitter(loss[:16]) >= 2 * p.early_jitter
        batch, online = starts_both("CS202", train_loss=loss, lr=lr)
        assert batch == online and batch and 16 < batch[0] < p.min_points, (seed, batch)
        later, _ = starts_both("CS202", off, train_loss=loss, lr=lr)
        assert not later or later[0] >= p.min_points, (seed, later)
    # A loss as noisy that learnt nothing (it bounces around its start) and climbs: not before min_points.
    bouncing = climb * np.exp(0.3 * (-1.0) ** t)
    batch, online = starts_both("CS202", train_loss=bouncing, lr=lr)
    assert batch == online and (not batch or batch[0] >= p.min_points), batch


def test_a_coarse_logged_climb_is_read_against_the_noise_around_its_trend():
    # A run logged every 10 steps: its loss falls 1.5 decades over its first 30 points, holds, and
    # climbs 8 % a point from point 45 as its learning rate keeps ramping. The 200 points the noise
    # gate reads hold that fall and the climb: their quartiles lie over `max_noise` (0.5 decades)
    # apart, as a tiny-batch loss's do, while the points jitter around their trend by 0.25 (0.15
    # decades between quartiles, under `trend_noise`).
    from tb_crash_signals.analysis.stats import jitter, jitter_decades, noise_decades

    t = np.arange(80)
    lr = 1e-3 * (1 + t) ** 2
    trend_only = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), spread_jitter=0.0,
                                                             trend_noise=0.0)})
    for seed in range(5):
        rng = np.random.default_rng(seed)
        loss = 0.03 * np.exp(np.maximum(30 - t, 0) / 8.5) * np.where(t < 45, 1.0, 1.08 ** (t - 45))
        loss = loss * np.exp(0.25 * rng.standard_normal(80))
        assert noise_decades(loss[:60]) >= 0.5 and jitter_decades(jitter(loss[:60])) < 0.3
        batch, online = starts_both("CS202", train_loss=loss, lr=lr)
        assert batch == online and batch and 50 < batch[0] < 70, batch
        assert starts_both("CS202", trend_only, train_loss=loss, lr=lr) == ([], [])


def test_growth_predicts_the_crossing_before_it_happens():
    g = healthy_grad(1200)
    t = np.arange(300)
    g[900:] = g[900:] * np.exp(0.03 * t)
    cross = 900 + int(np.argmax(g[900:] > 100))
    result = analyze(grad_norm=g)
    eps = episodes_of(result, "CS201")
    assert eps, result.episodes
    first = eps[0]
    assert first.severity == "critical" and first.family == "growth"
    assert first.start_step < cross - 20, (first.start_step, cross)
    fit = first.first_fit
    assert fit is not None and fit.projected_step is not None
    # At first detection the fit sees only the start of the growth: its
    # projection must still land near the real crossing, relative to the lead.
    assert abs(fit.projected_step - cross) < 0.6 * (cross - first.start_step)
    assert 0.015 < fit.growth_per_step < 0.045
    # The line drawn, and its crossing, start from where the grad norm is at the fit's end (the
    # median of its last 3 points), not from where the fitted line ends.
    end = fit.end_step
    drawn = fit.start_value * math.exp(fit.growth_per_step * (end - fit.start_step))
    assert drawn == pytest.approx(float(np.median(g[end - 2 : end + 1])), rel=1e-9)
    assert "crosses 100" in first.message
    assert first.first_fit == fit  # the first hit's fit, shown at the first alarm
    # The report keeps that prediction and the latest fit, refreshed as the episode grows.
    assert result.fits[0] == fit and result.fits[-1] == eps[-1].fit
    assert eps[-1].fit.end_step == eps[-1].end_step


def flat_then_doubling(every, doubling, seed, length=600):
    """A grad norm logged every `every` steps, flat (10 % noise) for 200 steps, then doubling every
    `doubling`, the loss rising with it, up to its crossing of 100 (within `length` steps): steps,
    grad norm, loss, crossing."""
    rng = np.random.default_rng(seed)
    steps = np.arange(0, length, every)
    g = np.where(steps < 200, 1.0, 2.0 ** ((steps - 200) / doubling)) * np.exp(0.1 * rng.standard_normal(steps.size))
    loss = 0.3 + 2.0 * np.exp(-steps / 300) * (1 + 0.02 * np.maximum(g - 1, 0))
    cross = int(steps[np.argmax(g > 100)])
    keep = steps <= cross
    return steps[keep], g[keep], loss[keep], cross


@pytest.mark.parametrize("every", [1, 5])
def test_growth_projection_fits_the_growth_not_the_flat_stretch_before_it(every):
    # The grad norm is flat, then doubles every 15 steps. The 40-point window at the first alarm
    # still holds flat points; a line through them grows too slowly and projects the crossing late
    # (a line through this window: ~+30 % at every step, ~+45 % at every 5). The fit starts where
    # the growth does, so the projection is within 20 % of the remaining distance.
    steps, g, loss, cross = flat_then_doubling(every, 15, seed=every)
    data = dict(grad_norm=series(g, steps), train_loss=series(loss, steps))
    first = episodes_of(analyze(**data), "CS201")[0]
    fit = first.first_fit
    assert first.start_step == fit.end_step < cross
    assert 190 <= fit.start_step <= 215, fit  # where the growth began
    assert fit.doubling_steps == pytest.approx(15, rel=0.15)
    assert abs(fit.projected_step - cross) <= 0.2 * (cross - fit.end_step), (fit, cross)
    online = online_growth(steps, g, loss)[0]
    assert (online.start_step, online.fit) == (first.start_step, first.fit)


def test_growth_window_spans_time_on_a_grad_norm_logged_every_10_steps():
    # Logged every 10 steps, flat for 200, then doubling every 25: it crosses 100 at its ~37th point.
    # A 40-point window with 10 points of normal level before it decides from the 50th; the window
    # of 200 steps' points (20) tells it a few points ahead, batch and online alike.
    steps, g, loss, cross = flat_then_doubling(10, 25, seed=4)
    data = dict(grad_norm=series(g, steps), train_loss=series(loss, steps))
    first = episodes_of(analyze(**data), "CS201")[0]
    assert first.start_step < cross and first.fit.end_step - first.fit.start_step <= 190
    online = online_growth(steps, g, loss)[0]
    assert (online.start_step, online.fit) == (first.start_step, first.fit)
    points = dataclasses.replace(RULES["CS201"].default_params(), window_steps=10_000)
    assert not episodes_of(analyze(dataclasses.replace(Config(), params={"CS201": points}), **data), "CS201")


@pytest.mark.parametrize("doubling", [50, 70])
def test_growth_too_slow_for_the_short_window_is_projected_by_the_slow_one(doubling):
    # Logged at every step, a grad norm doubling every 50-70 steps grows 1.5-1.7x over the short
    # window's 40 points, under `min_growth`: the slow window's 100 points see it double and project
    # the crossing within 20 % of the distance left, batch and online alike; without it, no alarm.
    steps, g, loss, cross = flat_then_doubling(1, doubling, seed=doubling, length=1000)
    data = dict(grad_norm=series(g, steps), train_loss=series(loss, steps))
    first = episodes_of(analyze(**data), "CS201")[0]
    fit = first.first_fit
    assert first.start_step == fit.end_step < cross - 100  # a lead of 100 steps or more
    assert fit.doubling_steps == pytest.approx(doubling, rel=0.25)
    assert abs(fit.projected_step - cross) <= 0.2 * (cross - fit.end_step), (fit, cross)
    online = online_growth(steps, g, loss)[0]
    assert (online.start_step, online.fit) == (first.start_step, first.fit)
    short_only = dataclasses.replace(RULES["CS201"].default_params(), slow_window=0)
    assert not episodes_of(analyze(dataclasses.replace(Config(), params={"CS201": short_only}), **data), "CS201")


def test_growth_of_a_fast_grad_norm_is_told_by_the_short_window():
    # Doubling every 10 steps: the short window tells it first and its fit is the one shown; the slow
    # window, which straddles the flat stretch, adds nothing (the alarm and fits as without it).
    steps, g, loss, _ = flat_then_doubling(1, 10, seed=3)
    data = dict(grad_norm=series(g, steps), train_loss=series(loss, steps))
    short_only = dataclasses.replace(RULES["CS201"].default_params(), slow_window=0)
    with_slow = analyze(**data)
    without = analyze(dataclasses.replace(Config(), params={"CS201": short_only}), **data)
    assert episodes_of(with_slow, "CS201") and episodes_of(with_slow, "CS201") == episodes_of(without, "CS201")


def test_growth_ignores_the_early_rise_of_a_healthy_run():
    n = 1500
    g = healthy_grad(n) * np.minimum(1 + np.arange(n) / 50.0, 8.0)
    assert "CS201" not in codes(analyze(grad_norm=g))


def test_growth_does_not_project_far_past_its_fit():
    # A warm-up: the grad norm quadruples over 50 steps with the learning rate, then settles, the
    # loss not yet falling. A line through the last ~15 steps says nothing of step 359: no alarm,
    # though the projected crossing is within the horizon; without the limit it would be one.
    n = 400
    rng = np.random.default_rng(11)
    t = np.arange(n)
    g = np.exp(0.035 * np.clip(t - 200, 0, 50)) * (1 + 0.03 * rng.standard_normal(n))
    loss = 2.3 * (1 + 0.01 * rng.standard_normal(n))
    assert starts_both("CS201", grad_norm=g, train_loss=loss) == ([], [])
    unlimited = dataclasses.replace(RULES["CS201"].default_params(), max_extrapolation=math.inf)
    cfg = dataclasses.replace(Config(), params={"CS201": unlimited})
    batch, online = starts_both("CS201", cfg, grad_norm=g, train_loss=loss)
    assert batch and batch == online


def test_growth_is_not_one_level_shift():
    # Layers unfrozen at step 300: the grad norm jumps 12x in one step and stays there while the loss
    # falls. A line through the step "doubles every few steps" and crosses 100 within the horizon;
    # with the step taken out the window is flat. The same jump followed by a growth that goes on
    # (it doubles every 15 steps after it) is still an alarm, as is the single step with the guard off.
    n = 400
    rng = np.random.default_rng(7)
    t = np.arange(n)
    noise = np.exp(0.1 * rng.standard_normal(n))
    shift = np.where(t < 300, 0.15, 1.8) * noise
    goes_on = shift * np.exp(np.log(2) / 15 * np.clip(t - 300, 0, None))
    loss = 1.0 * np.exp(-np.clip(t - 300, 0, None) / 300) * (1 + 0.01 * rng.standard_normal(n))
    assert starts_both("CS201", grad_norm=shift, train_loss=loss) == ([], [])
    batch, online = starts_both("CS201", grad_norm=goes_on, train_loss=loss)
    assert batch and batch == online and batch[0] >= 300
    off = dataclasses.replace(RULES["CS201"].default_params(), one_step=False)
    batch, online = starts_both("CS201", dataclasses.replace(Config(), params={"CS201": off}),
                                grad_norm=shift, train_loss=loss)
    assert batch and batch == online and 295 <= batch[0] <= 330


def converged_with_bursts(goes_on=None, n=1500, seed=3):
    """A noise-free fit deep into convergence under full-batch Adam: the grad norm falls from 1 to
    0.005, and at steps 600, 900 and 1200 it bursts 20x over 15 steps and comes back (the loss
    bumps 1.5x); with `goes_on`, it also grows without end from that step."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    g = np.maximum(np.exp(-t / 60), 0.005) * np.exp(0.2 * rng.standard_normal(n))
    loss = np.maximum(0.3 * np.exp(-t / 40), 1e-6) * np.exp(0.05 * rng.standard_normal(n))
    k = np.arange(25)
    burst = np.where(k < 15, np.exp(0.2 * k), np.exp(0.2 * 15 - 0.3 * (k - 15)))
    for b in (600, 900, 1200):
        g[b : b + 25] *= burst
        loss[b + 10 : b + 20] *= 1.5
    if goes_on is not None:
        g[goes_on:] *= np.exp(0.12 * (t[goes_on:] - goes_on))
    return g, loss


def test_growth_is_not_predicted_under_the_grad_norms_initial_level():
    # Each burst, read alone, "doubles every 3.5 steps" toward 100; the grad norm stands ~10x under
    # where it started. With `under_start` 0 each burst is a critical; a growth that goes on past
    # the initial level is told before it crosses 100.
    g, loss = converged_with_bursts()
    assert starts_both("CS201", grad_norm=g, train_loss=loss) == ([], [])
    off = dataclasses.replace(RULES["CS201"].default_params(), under_start=0.0)
    batch, online = starts_both("CS201", dataclasses.replace(Config(), params={"CS201": off}), grad_norm=g,
                                train_loss=loss)
    assert batch == online and len(batch) == 3 and all(b < s + 20 for b, s in zip(batch, (600, 900, 1200)))
    g, loss = converged_with_bursts(goes_on=1300)
    cross = int(np.argmax(g > 100))
    batch, online = starts_both("CS201", grad_norm=g, train_loss=loss)
    assert batch == online and len(batch) == 1 and 1300 < batch[0] < cross - 20, (batch, cross)


def test_without_step_takes_out_the_best_single_level_shift():
    from tb_crash_signals.analysis.rules.growth import without_step

    y = np.array([0.0, 0.1, -0.1, 0.0, 2.5, 2.4, 2.6, 2.5])
    flat, at = without_step(y)
    assert at == 4 and np.allclose(flat[:4], y[:4]) and np.allclose(flat[4:], y[4:] - 2.5)
    ramp = np.arange(8.0)  # a line has no one step: taking the best one out leaves it rising
    assert np.ptp(without_step(ramp)[0]) >= 3


def loss_scale_growth(seed, points, flat, per_doubling, start, jitter):
    """A grad norm logged every 5 steps that doubles every `per_doubling` points from point `flat`
    on (a loss scale that doubles without bound), under a flat loss: steps, grad norm, loss."""
    rng = np.random.default_rng(seed)
    k = np.arange(points)
    g = start * 2 ** (np.clip(k - flat, 0, None) / per_doubling) * np.exp(jitter * rng.standard_normal(k.size))
    return 5 * k, g, 2.3 * (1 + 0.01 * rng.standard_normal(k.size))


def online_growth(steps, g, loss) -> list:
    """The CS201 episodes of a Monitor fed the steps one by one."""
    m = Monitor()
    for step, gv, lv in zip(steps.tolist(), g.tolist(), loss.tolist()):
        m.update(step, grad_norm=gv, train_loss=lv)
    return [e for e in m.episodes() if e.code == "CS201"]


def test_growth_logged_every_5_steps_is_told_a_fit_span_ahead():
    # Logged every 5 steps, the grad norm doubles every 60 steps under a flat loss (a loss scale
    # that doubles without bound): its 40-point fit spans 195 steps, and the crossing ~140 steps
    # ahead is within what the fit can tell. A horizon of 100 steps held the alarm back to ~95.
    steps, g, loss = loss_scale_growth(3, points=150, flat=60, per_doubling=12, start=0.5, jitter=0.05)
    crossing = 5 * (60 + 12 * math.log2(100 / 0.5))
    first = episodes_of(analyze(grad_norm=series(g, steps), train_loss=series(loss, steps)), "CS201")[0]
    assert crossing - first.start_step > 120
    assert abs(first.fit.projected_step - crossing) <= 0.2 * (crossing - first.start_step)
    online = online_growth(steps, g, loss)[0]
    assert (online.start_step, online.fit) == (first.start_step, first.fit)


def test_growth_waits_while_the_loss_falls_fast():
    # A run that starts to learn: the grad norm grows ~8x with the first large steps while the
    # loss drops to new lows far under its slow best. The same growth under a flat loss is an alarm.
    n = 400
    rng = np.random.default_rng(5)
    t = np.arange(n)
    g = 0.4 * np.exp(0.05 * np.clip(t - 150, 0, 60)) * (1 + 0.05 * rng.standard_normal(n))
    falling = np.where(t < 150, 2.3, 2.3 * np.exp(-0.01 * (t - 150))) * (1 + 0.01 * rng.standard_normal(n))
    flat = 2.3 * (1 + 0.01 * rng.standard_normal(n))
    fast = dataclasses.replace(RULES["CS201"].default_params(), threshold=20.0)
    cfg = dataclasses.replace(Config(), params={"CS201": fast})
    assert "CS201" not in codes(analyze(config=cfg, grad_norm=g, train_loss=falling))
    assert "CS201" in codes(analyze(config=cfg, grad_norm=g, train_loss=flat))
    # The online monitor decides alike, point by point.
    for loss, fires in ((falling, False), (flat, True)):
        m = Monitor(cfg)
        for step in range(n):
            m.update(step, train_loss=float(loss[step]), grad_norm=float(g[step]))
        assert any(e.code == "CS201" for e in m.episodes()) == fires


def test_growth_far_above_its_normal_level_is_told_while_the_loss_still_learns():
    # A loss scale that doubles without bound while the run still learns: logged every 5 steps,
    # the grad norm doubles every 30 steps from 0.2 and the loss keeps falling to new lows, far
    # under its slow best. A run's first large steps raise the grad norm a few times over; once it
    # stands `learning_excess` (100) x its normal level the fall is no excuse, and the explosion is
    # predicted before the grad norm crosses 100. With that guard off, nothing before the crossing.
    steps, g, _ = loss_scale_growth(4, points=140, flat=30, per_doubling=6, start=0.2, jitter=0.05)
    loss = 2.3 * np.exp(-steps / 400) * (1 + 0.01 * np.random.default_rng(4).standard_normal(steps.size))
    crossing = int(steps[np.argmax(g > 100)])
    first = episodes_of(analyze(grad_norm=series(g, steps), train_loss=series(loss, steps)), "CS201")
    assert first and crossing - first[0].start_step >= 30, (first, crossing)
    online = online_growth(steps, g, loss)
    assert [(e.start_step, e.fit) for e in online] == [(e.start_step, e.fit) for e in first]
    guarded = dataclasses.replace(RULES["CS201"].default_params(), learning_excess=0.0)
    cfg = dataclasses.replace(Config(), params={"CS201": guarded})
    late = episodes_of(analyze(config=cfg, grad_norm=series(g, steps), train_loss=series(loss, steps)), "CS201")
    assert not late or late[0].start_step >= crossing, (late, crossing)


def test_growth_waits_while_the_learning_rate_ramps_up_and_the_loss_holds():
    # A long warm-up from a small initialisation: the grad norm grows ~10x in 60 steps while the
    # learning rate ramps up linearly and the loss holds at its level. While the rate still
    # ramps, that is the warm-up's larger steps; the same growth under a constant rate, or with
    # the loss turned up 20 % as the rate ramps on, is an alarm.
    n = 400
    rng = np.random.default_rng(7)
    t = np.arange(n)
    g = 0.15 * np.exp(0.04 * np.clip(t - 150, 0, 60)) * (1 + 0.05 * rng.standard_normal(n))
    loss = 1.0 * (1 + 0.01 * rng.standard_normal(n))
    ramp = 1e-4 * (1 + t)
    constant = np.full(n, 1e-2)
    fast = dataclasses.replace(RULES["CS201"].default_params(), threshold=20.0)
    cfg = dataclasses.replace(Config(), params={"CS201": fast})
    assert starts_both("CS201", cfg, grad_norm=g, train_loss=loss, lr=ramp) == ([], [])
    for data in ({"lr": constant, "train_loss": loss},
                 {"lr": ramp, "train_loss": loss * np.where(t >= 170, 1.2, 1.0)}):
        batch, online = starts_both("CS201", cfg, grad_norm=g, **data)
        assert batch and batch == online, data


def test_growth_in_a_warm_up_needs_the_loss_turned_up_out_of_its_noise():
    # The same warm-up under a per-step loss that jitters with its batches: its 7-point median
    # wanders 10-20 % above its lowest 31-point median all the time, which is no loss turned up.
    # Told so only once it stands `loss_up_z` noise units above it, most seeds stay quiet (the
    # ratio alone alarmed at every one); a loss turned up 60 % as the rate ramps on is still told
    # at every seed, within 40 steps of the growth's start.
    n = 400
    t = np.arange(n)
    ramp = 1e-4 * (1 + t)
    fast = dataclasses.replace(RULES["CS201"].default_params(), threshold=20.0)
    ratio_alone = dataclasses.replace(fast, loss_up_z=0.0)
    quiet = {"noise": 0, "ratio alone": 0}  # seeds without an alarm
    for seed in range(6):
        rng = np.random.default_rng(seed)
        g = 0.15 * np.exp(0.04 * np.clip(t - 150, 0, 60)) * (1 + 0.05 * rng.standard_normal(n))
        loss = np.exp(0.15 * rng.standard_normal(n))
        for name, params in (("noise", fast), ("ratio alone", ratio_alone)):
            cfg = dataclasses.replace(Config(), params={"CS201": params})
            batch, online = starts_both("CS201", cfg, grad_norm=g, train_loss=loss, lr=ramp)
            assert batch == online
            quiet[name] += not batch
        cfg = dataclasses.replace(Config(), params={"CS201": fast})
        batch, online = starts_both("CS201", cfg, grad_norm=g, train_loss=loss * np.where(t >= 170, 1.6, 1.0),
                                    lr=ramp)
        assert batch and batch == online and batch[0] <= 190, (seed, batch)
    assert quiet["noise"] >= 3 and quiet["ratio alone"] == 0, quiet


def test_growth_is_told_from_ten_points_of_history():
    # A loss scale that doubles without bound, logged every 5 steps: the grad norm doubles every 40
    # steps from point 10 under a flat loss and crosses 100 near point 74 (step 370). A fit window
    # of 40 points with 40 more behind it decides from point 79 on, after the crossing; 10 points
    # behind it tell the run's normal level ~125 steps ahead.
    steps, g, loss = loss_scale_growth(7, points=120, flat=10, per_doubling=8, start=0.4, jitter=0.15)
    data = {"grad_norm": series(g, steps), "train_loss": series(loss, steps)}
    crossing = int(steps[np.argmax(g > 100)])
    eps = episodes_of(analyze(**data), "CS201")
    assert eps
    ahead = crossing - eps[0].start_step
    assert ahead >= 100
    assert abs(eps[0].first_fit.projected_step - crossing) <= 0.2 * ahead
    online = online_growth(steps, g, loss)
    assert [(e.start_step, e.first_fit, e.fit) for e in online] == [(e.start_step, e.first_fit, e.fit) for e in eps]
    forty = dataclasses.replace(RULES["CS201"].default_params(), min_baseline=40)
    assert "CS201" not in codes(analyze(config=dataclasses.replace(Config(), params={"CS201": forty}), **data))


def test_overflow_burst_at_the_start_is_the_scaler_calibrating():
    # fp16 from a high initial scale: 16 skipped steps in a row from step 3 (2^32 down to 2^16),
    # then training as usual. The same burst later means no update is applied: CS004 at its 8th
    # point. One at the start that goes on fires at its 24th.
    loss = healthy_loss(300)

    def grad(start, n):
        g = healthy_grad(300)
        g[start:start + n] = np.inf
        return g
    assert starts_both("CS004", train_loss=loss, grad_norm=grad(3, 16)) == ([], [])
    assert starts_both("CS004", train_loss=loss, grad_norm=grad(200, 16)) == ([207], [207])
    batch, online = starts_both("CS004", train_loss=loss, grad_norm=grad(3, 30))
    assert batch == online == [26]
    (ep,) = episodes_of(analyze(train_loss=loss, grad_norm=grad(3, 30)), "CS004")
    assert ep.message.startswith("grad norm non-finite on 24+ consecutive points from step 26")


def test_plateau_fires_when_loss_never_improves():
    rng = np.random.default_rng(3)
    flat = 1.39 + 0.003 * rng.standard_normal(60)
    eps = episodes_of(analyze(train_loss=flat), "CS301")
    assert eps and eps[0].start_step <= 20
    assert "CS301" not in codes(analyze(train_loss=healthy_loss(60, noise=0.0)))


def test_plateau_that_lost_ground_says_so_in_scan_and_the_monitor():
    # A loss that learnt, then climbed to 4.0 and stays there, 2.02x where it started (the median
    # of its first 3 points, 1.99: start_level); one that learnt to 0.5 and came back to 1.5, 2.68x its best
    # level (the lowest median of 9 points, 0.56, at the bottom of the V); and one stuck at its start.
    rng = np.random.default_rng(5)
    t = np.arange(400)
    path = np.where(t < 100, 2.0 - 1.5 * t / 100, np.where(t < 150, 0.5 + 3.5 * (t - 100) / 50, 4.0))
    back = np.where(t < 100, path, np.minimum(path, 1.5))
    for loss, why in ((path * (1 + 0.002 * rng.standard_normal(400)), "above where it started (2.02x its initial"),
                      (back * (1 + 0.002 * rng.standard_normal(400)),
                       "back near where it started after it had learnt (2.68x its best level)"),
                      (1.39 + 0.003 * rng.standard_normal(60), ", near where it started")):
        batch = episodes_of(analyze(train_loss=loss), "CS301")
        m = Monitor()
        for i, v in enumerate(loss.tolist()):
            m.update(i, train_loss=v)
        online = [e for e in m.episodes() if e.code == "CS301"]
        assert batch and [e.message for e in batch] == [e.message for e in online]
        assert why in batch[0].message, batch[0].message


def test_plateau_near_the_start_after_updates_far_too_large_says_so_in_scan_and_the_monitor():
    # A loss stuck at chance from the start; its update ratio logged every 10 steps. Updates of 20 %
    # of the weights a step at first (a learning rate far too high) are told in the note; the usual
    # 1e-3 are not, nor a large ratio logged only at the step the stall is first told (the monitor
    # takes a step's update ratio after its loss, so the note reads the ones before it).
    rng = np.random.default_rng(6)
    flat = 2.30 + 0.003 * rng.standard_normal(80)
    for ratios, told in ((np.r_[0.2, 0.12, np.full(6, 0.03)], True), (np.full(8, 1e-3), False)):
        updates = series(ratios, steps=np.arange(0, 80, 10))
        batch = episodes_of(analyze(train_loss=flat, update_ratio=updates), "CS301")
        m = Monitor()
        for i, v in enumerate(flat.tolist()):
            m.update(i, train_loss=v, **({"update_ratio": float(ratios[i // 10])} if i % 10 == 0 else {}))
        online = [e for e in m.episodes() if e.code == "CS301"]
        assert batch and [e.message for e in batch] == [e.message for e in online]
        said = "near where it started after updates far too large (update ratio up to 0.2)"
        assert (said in batch[0].message) is told
    start = episodes_of(analyze(train_loss=flat), "CS301")[0].start_step
    late = series([1e-3, 0.5], steps=[0, start])
    (ep,) = episodes_of(analyze(train_loss=flat, update_ratio=late), "CS301")
    assert "updates far too large" not in ep.message
    off = dataclasses.replace(RULES["CS301"].default_params(), updates_high=0.0)
    updates = series(np.r_[0.2, np.full(7, 0.03)], steps=np.arange(0, 80, 10))
    (ep,) = episodes_of(analyze(Config(params={"CS301": off}), train_loss=flat, update_ratio=updates), "CS301")
    assert "updates far too large" not in ep.message


def test_plateau_near_a_start_its_first_points_blew_up_from():
    # A 10-class classifier at a learning rate far too high: 2.30 (ln 10) at its first step, 3-10 over
    # the next seven, then at chance (~2.2) for good. The median of its first 10 points (~5) made
    # 2.2 read as learnt ("levelled off after it learnt", a note); its start was its first point.
    rng = np.random.default_rng(5)
    n = 1200
    noise = np.exp(0.05 * rng.standard_normal(n))
    blown = math.log(10) * 0.97 * noise
    blown[0] = math.log(10)
    blown[1:8] = [10.3, 5.0, 7.5, 8.2, 5.8, 3.1, 2.7]
    assert starts_both("CS301", train_loss=blown) == ([30], [30])
    (told,) = episodes_of(analyze(train_loss=blown), "CS301")
    assert told.severity == "warning" and "near where it started" in told.message
    # The same first points, then learning: no stall near the start.
    learnt = blown.copy()
    learnt[8:] = (0.4 + 1.9 * np.exp(-np.arange(n - 8) / 80)) * noise[8:]
    assert starts_both("CS301", train_loss=learnt) == ([], [])


def test_plateau_after_a_fivefold_fall_in_the_first_points_is_convergence():
    # Logged every 10 steps at a constant rate: a regression at its noise floor by its 3rd point
    # (1.4, 0.14, 0.1, then ~0.02): its initial level (the median of its first 10 points) is
    # already trained, so the floor is no stall "near where it started". Read against that level
    # alone (`start_points` 10), `learnt_drop` tells it: the loss is a fifth of its first point.
    rng = np.random.default_rng(11)
    noise = 1 + 0.1 * rng.standard_normal(300)
    floor = np.r_[1.4, 0.14, 0.1, np.full(297, 0.02)] * noise
    assert starts_both("CS301", train_loss=floor, lr=np.full(300, 0.02)) == ([], [])
    alone = dataclasses.replace(RULES["CS301"].default_params(), start_points=10)
    assert starts_both("CS301", dataclasses.replace(Config(), params={"CS301": alone}),
                       train_loss=floor, lr=np.full(300, 0.02)) == ([], [])
    off = dataclasses.replace(alone, learnt_drop=0.0)
    batch, online = starts_both("CS301", dataclasses.replace(Config(), params={"CS301": off}),
                                train_loss=floor, lr=np.full(300, 0.02))
    assert batch == online and batch


def test_plateau_after_a_fivefold_fall_from_the_first_point_alone_is_convergence():
    # The fall all in the first logged step (0.8, then 0.19 creeping to a noisy floor at 0.12): the
    # median of the first 3 points is ~0.18, of which the floor is ~0.65x, but the loss is 0.15x its
    # first point. It learnt; the floor is no stall near where it started, even where a stall at
    # 0.6x the initial level would count as stuck.
    rng = np.random.default_rng(12)
    n = 300
    creep = np.r_[0.8, 0.12 + 0.07 * np.exp(-np.arange(n - 1) / 20)] * (1 + 0.1 * rng.standard_normal(n))
    lr = np.full(n, 0.02)
    assert starts_both("CS301", train_loss=creep, lr=lr) == ([], [])
    low = dataclasses.replace(RULES["CS301"].default_params(), stuck=0.6)
    lowered = dataclasses.replace(Config(), params={"CS301": low})
    assert starts_both("CS301", lowered, train_loss=creep, lr=lr) == ([], [])
    # Without the fivefold test, the first 10 points' median (0.19) puts the floor near the start.
    off = dataclasses.replace(low, learnt_drop=0.0)
    batch, online = starts_both("CS301", dataclasses.replace(Config(), params={"CS301": off}), train_loss=creep, lr=lr)
    assert batch == online and batch


def test_plateau_from_the_first_points_needs_a_smooth_loss():
    # Epoch means stuck at chance from the first epoch: a plateau by the 11th point. A per-step
    # loss as flat for its first 10 points, with minibatch noise, then learning: a slow start.
    rng = np.random.default_rng(4)
    epochs = np.r_[2.321, np.full(10, 2.303) + 1e-5 * rng.standard_normal(10)]
    batch, online = starts_both("CS301", train_loss=epochs)
    assert batch == online == [10]
    t = np.arange(300)
    per_step = 2.3 * np.where(t < 10, 1.0, np.exp(-0.01 * (t - 10))) * (1 + 0.01 * rng.standard_normal(300))
    assert starts_both("CS301", train_loss=per_step) == ([], [])
    # With a lax `early_jitter` (0.05) the same per-step start counts as smooth: a plateau at once.
    lax = dataclasses.replace(RULES["CS301"].default_params(), early_jitter=0.05)
    cfg = dataclasses.replace(Config(), params={"CS301": lax})
    batch, online = starts_both("CS301", cfg, train_loss=per_step)
    assert batch == online and batch and batch[0] <= 12


def test_plateau_from_the_first_15_points_needs_a_smooth_loss():
    # A per-step classifier at chance for its first 16 steps, with minibatch noise, then learning:
    # its stall began at the 11th point, after the initial level was set, but still in the run's
    # start. With `early_points` 10 (only the initial level's points judged by their noise) it was
    # a plateau at step 18.
    rng = np.random.default_rng(9)
    t = np.arange(300)
    slow = 2.3 * np.where(t < 16, 1.0, np.exp(-0.01 * (t - 16))) * (1 + 0.01 * rng.standard_normal(300))
    assert starts_both("CS301", train_loss=slow) == ([], [])
    ten = dataclasses.replace(RULES["CS301"].default_params(), early_points=10)
    batch, online = starts_both("CS301", dataclasses.replace(Config(), params={"CS301": ten}), train_loss=slow)
    assert batch == online and batch and batch[0] <= 20
    # Epoch means as flat from their 12th point on are still a plateau.
    epochs = np.r_[np.linspace(2.6, 2.32, 11), np.full(20, 2.303) + 1e-5 * rng.standard_normal(20)]
    batch, online = starts_both("CS301", train_loss=epochs)
    assert batch == online and batch


def test_plateau_after_a_fast_first_fall_is_convergence_whatever_the_schedule():
    # The loss falls 3x in its first 5 points, then hovers at its floor: the median of its first 10
    # is that floor, the median of its first 3 where it started. Under a decaying schedule
    # (ExponentialLR, gamma 0.99: under 0.9x its peak from the 11th point, 1.8 % of it at the end)
    # or a constant learning rate, it has learnt and is converging: no stall "near where it
    # started" (nor CS303's note, which reads the median of 10: the floor never stood under 0.75x
    # it). A loss that fell 12 % in its first points and hovers there is stuck.
    rng = np.random.default_rng(7)
    n = 400
    t = np.arange(n)
    noise = 1 + 0.02 * rng.standard_normal(n)
    loss = np.where(t < 5, 1.2 - 0.16 * t, 0.4) * noise
    decaying, constant = 1e-3 * 0.99**t, np.full(n, 1e-3)
    for lr in (decaying, constant):
        assert starts_both("CS301", train_loss=loss, lr=lr) == ([], [])
    batch, online = starts_both("CS301", train_loss=np.where(t < 5, 1.2 - 0.03 * t, 1.05) * noise, lr=constant)
    assert batch == online and batch
    # start_points = 10 measures the stall against the median of the first 10 points alone.
    old = dataclasses.replace(RULES["CS301"].default_params(), start_points=10)
    cfg = dataclasses.replace(Config(), params={"CS301": old})
    for lr in (decaying, constant):
        batch, online = starts_both("CS301", cfg, train_loss=loss, lr=lr)
        assert batch == online and batch


def test_a_loss_that_learnt_then_levelled_off_is_a_note_not_a_warning():
    # A per-step loss falls 5x, then hovers at its floor for the last 60 % of the run under a
    # constant learning rate: CS303 tells it (info), once the stall is 35 % of the points so far;
    # CS301 stays quiet (the run learnt, its learning rate works).
    rng = np.random.default_rng(11)
    n = 1000
    t = np.arange(n)
    loss = (2.0 * np.exp(-t / 60) + 0.4) * (1 + 0.01 * rng.standard_normal(n))
    lr = np.full(n, 1e-3)
    batch, online = starts_both("CS303", train_loss=loss, lr=lr)
    assert batch == online and len(batch) == 1
    assert 500 <= batch[0] <= 700
    result = analyze(train_loss=loss, lr=lr)
    assert "CS301" not in codes(result)
    note = episodes_of(result, "CS303")[0]
    assert note.severity == "info" and "levelled off" in note.message
    # Still learning (a slow decay to the end): nothing to tell.
    slow = (2.0 * np.exp(-t / 400) + 0.4) * (1 + 0.01 * rng.standard_normal(n))
    assert starts_both("CS303", train_loss=slow, lr=lr) == ([], [])
    # Stuck near where it started: CS301's warning, not this note.
    stuck = 2.3 * (1 + 0.005 * rng.standard_normal(n))
    assert starts_both("CS303", train_loss=stuck, lr=lr) == ([], [])


def test_a_loss_logged_every_50_steps_that_levelled_off_is_told_within_its_few_points():
    # Lightning's default cadence: 24 points over 1 200 steps, each one batch's loss (10 % noise).
    # The loss fell 3x before its second point and hovers from step ~300: the median of its first 10
    # points is that floor, and 24 points are fewer than the 30 the per-step patience waits for.
    # Read coarsely (5-point medians, a patience of 8 points), against its first points' level, it
    # learnt and levelled off: the note, batch and Monitor alike. Still falling to the end, or
    # hovering where it started, it is no note; nor with the coarse reading off (`coarse_every` 0).
    steps = np.arange(49, 1200, 50)
    t = np.arange(steps.shape[0])
    off = Config(params={"CS303": dataclasses.replace(RULES["CS303"].default_params(), coarse_every=0.0)})
    told = 0
    for seed in range(6):
        noise = 1 + 0.1 * np.random.default_rng(seed).standard_normal(t.shape[0])
        data = {"train_loss": series((0.3 + 0.9 * np.exp(-t / 1.5)) * noise, steps)}
        batch, monitor = starts_both_at("CS303", data)
        assert batch == monitor, seed
        told += bool(batch) and batch[0] >= 300
        assert starts_both_at("CS303", data, off) == ([], []), seed
        for other in ((1.2 - 0.035 * t) * noise, 1.2 * noise):
            assert starts_both_at("CS303", {"train_loss": series(other, steps)}) == ([], []), seed
    assert told >= 5, told
    # The same loss logged at every step for 24 steps: too few points to tell anything.
    dense = {"train_loss": series((0.3 + 0.9 * np.exp(-t / 1.5)) * noise, np.arange(24))}
    assert starts_both_at("CS303", dense) == ([], [])


def test_a_loss_creeping_down_under_two_percent_a_patience_has_levelled_off():
    # After its fall, a floor that keeps creeping down a straight 4.3 % over the run: about 1.5 %
    # over a patience window (35 % of the points so far) - a loss that has levelled off, as a
    # cosine tail's does. Creeping 10 % over the run (3.5 % a window) it still learns.
    rng = np.random.default_rng(12)
    n = 1000
    t = np.arange(n)
    lr = np.full(n, 1e-3)

    def floor_creeping(share):
        return (2.0 * np.exp(-t / 60) + 0.4 * (1 - share * t / n)) * (1 + 0.005 * rng.standard_normal(n))

    batch, online = starts_both("CS303", train_loss=floor_creeping(0.043), lr=lr)
    assert batch == online and len(batch) == 1
    assert starts_both("CS303", train_loss=floor_creeping(0.10), lr=lr) == ([], [])


def test_a_loss_flat_while_its_learning_rate_still_ramps_up_has_not_levelled_off():
    # The same fall, then a floor held while a long warm-up (500 steps) keeps raising the learning
    # rate to a new peak at every point: no note until the stall's whole patience (35 % of the
    # points so far) lies after the ramp, from point ~767 on.
    rng = np.random.default_rng(11)
    n = 1000
    t = np.arange(n)
    loss = (2.0 * np.exp(-t / 60) + 0.4) * (1 + 0.01 * rng.standard_normal(n))
    ramp = 1e-3 * np.minimum(1.0, (t + 1) / 500)
    batch, online = starts_both("CS303", train_loss=loss, lr=ramp)
    assert batch == online and batch and batch[0] >= 765
    assert starts_both("CS303", train_loss=loss, lr=np.full(n, 1e-3))[0][0] < 700


def test_plateau_start_points_past_the_initial_levels_10_read_those_10():
    # A config built in code may pass start_points 11, past its range: the batch rule and the
    # monitor both read the initial level's 10 points (an 11th, a spike, would lift the median
    # from 0.4 to 0.5 and the stall at 0.3 would no longer be "stuck").
    n = 300
    loss = np.r_[[1.2, 1.0, 0.8, 0.6, 0.5], np.full(5, 0.3), [1.2], np.full(n - 11, 0.3)]
    loss = loss * (1 + 0.001 * np.sin(np.arange(n)))
    decaying = 1e-3 * 0.99 ** np.arange(n)
    wide = dataclasses.replace(RULES["CS301"].default_params(), start_points=11)
    batch, online = starts_both("CS301", dataclasses.replace(Config(), params={"CS301": wide}),
                                train_loss=loss, lr=decaying)
    assert batch == online and batch


def test_plateau_under_a_learning_rate_gone_needs_it_gone_when_the_stall_began():
    # Cosine annealing with a warm restart: the loss converges within each cycle and stands still
    # while the rate decays to ~0 at the cycle's end. It stalled under a working rate: converging.
    # Before, the stall counted once the rate was under 1 % of its peak (at point 581).
    rng = np.random.default_rng(12)
    period = 300
    t = np.arange(2 * period)
    lr = np.maximum(1e-3 * 0.5 * (1 + np.cos(np.pi * (t % period) / period)), 2e-6)
    loss = (0.4 + 1.9 * np.exp(-np.cumsum(lr) / 0.03)) * (1 + 0.003 * rng.standard_normal(t.size))
    assert starts_both("CS301", train_loss=loss, lr=lr) == ([], [])
    # A rate dropped to ~0 while the run was still learning: the loss stands still from then on.
    dropped = np.where(t < 150, 1e-3, 1e-8)
    loss = (0.4 + 1.9 * np.exp(-np.cumsum(dropped) / 0.3)) * (1 + 0.003 * rng.standard_normal(t.size))
    batch, online = starts_both("CS301", train_loss=loss, lr=dropped)
    assert batch == online and batch and batch[0] < 300
    (first,) = episodes_of(analyze(train_loss=loss, lr=dropped), "CS301")
    assert "with the learning rate at 0.001% of its peak" in first.message


def test_plateau_is_quiet_during_learning_rate_warmup():
    flat = np.full(40, 2.3)
    lr = np.linspace(1e-6, 1e-3, 40)
    assert "CS301" not in codes(analyze(train_loss=flat, lr=lr))


def test_a_loss_back_at_its_start_after_it_learnt_is_a_plateau_even_as_its_warm_up_ramps():
    # Epoch means under a learning rate that ramps up linearly through all 40 epochs (a warm-up, as far
    # as 40 points can tell): the loss learnt from 2.3 to ~0.9, the ramp drove it back to ~2.3, and it
    # stays there. A warm-up holds off a plateau because a tiny learning rate has not given the loss
    # its chance; this one had it, and lost what it learnt: the stall near the start counts, batch and
    # online alike. The same flat loss with nothing learnt stays a warm-up's (quiet).
    rng = np.random.default_rng(5)
    t = np.arange(40)
    lr = np.linspace(1e-3, 4e-2, 40)
    learnt = np.where(t < 10, 0.9 + 1.4 * np.exp(-t / 3.0), np.minimum(0.9 * 1.15 ** (t - 9), 2.3))
    loss = learnt * (1 + 0.003 * rng.standard_normal(t.size))
    batch, online = starts_both("CS301", train_loss=loss, lr=lr)
    assert batch == online and batch, batch
    (first,) = episodes_of(analyze(train_loss=loss, lr=lr), "CS301")
    assert "back near where it started after it had learnt" in first.message
    flat = 2.3 * (1 + 0.003 * rng.standard_normal(t.size))
    assert starts_both("CS301", train_loss=flat, lr=lr) == ([], [])
    # Nor one far under its start: a classifier under Adam whose rate ramps 1e-3 -> 0.04 over 40
    # epochs (a real run's epoch losses, rounded) learnt 0.82 -> ~0.1 in five epochs, and its loss
    # grows noisier as the rate climbs, to 1.4x its best: it lost little of what it learnt, though
    # its first 10 epochs' median (the level lost ground is read against) is ~0.14.
    noisier = np.array([0.817, 0.412, 0.207, 0.155, 0.123, 0.131, 0.171, 0.136, 0.143, 0.166, 0.129, 0.136,
                        0.184, 0.108, 0.142, 0.169, 0.125, 0.105, 0.141, 0.0847, 0.152, 0.151, 0.136, 0.213,
                        0.161, 0.104, 0.175, 0.156, 0.0929, 0.0815, 0.188, 0.148, 0.232, 0.21, 0.199, 0.135,
                        0.149, 0.163, 0.257, 0.137])
    assert starts_both("CS301", train_loss=noisier, lr=lr) == ([], [])


def test_plateau_counts_its_patience_from_the_end_of_the_warmup():
    # Flat under a tiny warm-up learning rate, then learning slowly: no plateau right after it.
    n = 120
    lr = np.minimum(np.arange(1, n + 1) / 60.0, 1.0) * 1e-3
    flat = np.concatenate([np.full(60, 2.3), 2.3 - 0.012 * np.arange(1, 61)])
    assert "CS301" not in codes(analyze(train_loss=flat, lr=lr))
    # Stuck after the warm-up too: the plateau fires, counted from the warm-up's end.
    stuck = np.full(n, 2.3)
    eps = episodes_of(analyze(train_loss=stuck, lr=lr), "CS301")
    assert eps and eps[0].start_step >= 60 + 8
    # A learning rate rising exponentially is no warm-up: from the 20th point, where it can be told,
    # the stall counts from the start; a short run (60 epochs) gets its plateau.
    rising = np.geomspace(1e-5, 1.0, 200)
    eps = episodes_of(analyze(train_loss=np.full(200, 2.3), lr=rising), "CS301")
    assert eps and eps[0].start_step == 20
    eps = episodes_of(analyze(train_loss=np.full(60, 2.3), lr=np.geomspace(1e-3, 1.0, 60)), "CS301")
    assert eps and eps[0].start_step == 20
    # Rising through all `max_warmup` points ever faster, but not exponentially (a quadratic ramp
    # from 0): no warm-up either, from the 100th point.
    quadratic = 1e-3 * (np.arange(200) / 100.0) ** 2
    eps = episodes_of(analyze(train_loss=np.full(200, 2.3), lr=quadratic), "CS301")
    assert eps and eps[0].start_step == 100
    # Warm-ups from ~0, linear or cosine, rise mostly early on a log scale: they stay warm-ups.
    t = np.arange(150)
    cosine = 1e-3 * (1 - np.cos(np.pi * np.minimum(t / 140.0, 1.0))) / 2 + 1e-7
    eps = episodes_of(analyze(train_loss=np.full(150, 2.3), lr=cosine), "CS301")
    assert not eps or eps[0].start_step >= 100, [e.start_step for e in eps]
    # One-cycle's cosine warm-up from 1/25 of its peak (300 points) rises mostly late on a log scale
    # at first, faster than an exponential: a warm-up too. The loss, flat for its first 40 points,
    # then learns: no plateau (a stall counted from the start would be one at the 39th point).
    t = np.arange(1000)
    peak = 1e-3
    one_cycle = peak / 25 + (peak - peak / 25) * (1 - np.cos(np.pi * np.minimum(t / 300.0, 1.0))) / 2
    loss = 2.3 * np.exp(-0.005 * np.maximum(t - 40, 0))
    assert starts_both("CS301", train_loss=loss, lr=one_cycle) == ([], [])
    # Over 120 points its halves rise alike on a log scale (within 1.5x) from its 26th point on, but
    # not its quarters: still a warm-up, with the loss flat for its first 50 points (taken for an
    # exponential schedule, the stall counted from the start was a plateau at the 26th).
    one_cycle = peak / 25 + (peak - peak / 25) * (1 - np.cos(np.pi * np.minimum(t / 120.0, 1.0))) / 2
    loss = 2.3 * np.exp(-0.005 * np.maximum(t - 50, 0))
    assert starts_both("CS301", train_loss=loss, lr=one_cycle) == ([], [])
    # Fed at every step, a run of 2 200 steps under PyTorch's OneCycleLR warms up over 660 points: over
    # the first 100 it rose faster in their second half, as a ramp from ~0 does, but only a few times
    # over its floor: still a warm-up. The loss, flat for its first 120 points, then learns: no plateau
    # (taken for a ramp gone wrong, the stall counted from the start was one at the 100th point).
    one_cycle = peak / 25 + (peak - peak / 25) * (1 - np.cos(np.pi * np.minimum(t / 660.0, 1.0))) / 2
    loss = 2.3 * np.exp(-0.005 * np.maximum(t - 120, 0)) * (1 + 0.002 * np.sin(t))
    assert starts_both("CS301", train_loss=loss, lr=one_cycle) == ([], [])
    # A long linear warm-up is one: the stall counts from the end of the first `max_warmup` points.
    linear = np.linspace(1e-5, 1e-3, 200)
    eps = episodes_of(analyze(train_loss=np.full(200, 2.3), lr=linear), "CS301")
    assert eps and eps[0].start_step > 150, [e.start_step for e in eps]


def test_plateau_under_a_learning_rate_that_climbs_back_far_above_its_peak():
    # The loss learnt, then stalls while the learning rate, once decayed, climbs to several times
    # where it was: a schedule gone wrong, told as a plateau (the run is no longer near its start).
    rng = np.random.default_rng(5)
    n = 400
    t = np.arange(n)
    loss = np.concatenate([np.linspace(2.5, 1.5, 150), np.full(n - 150, 1.5)]) * np.exp(0.002 * rng.standard_normal(n))
    lr = np.where(t < 150, 5e-3 * (1 - t / 150) + 5e-4, 5e-4 + (t - 150) * 1e-4)
    eps = episodes_of(analyze(train_loss=loss, lr=lr), "CS301")
    assert eps and "climbed back" in eps[0].message, [e.message for e in eps]
    assert 200 <= eps[0].start_step <= 300
    monitor = Monitor()
    for step in range(n):
        monitor.update(step, lr=float(lr[step]), train_loss=float(loss[step]))
    assert [e.start_step for e in monitor.episodes() if e.code == "CS301"] == [e.start_step for e in eps]
    # The same stall under a cyclic schedule, which returns to its peak and no higher: converging.
    cyclic = 5e-4 + 5e-3 * (1 + np.cos(2 * np.pi * t / 100)) / 2
    assert "CS301" not in codes(analyze(train_loss=loss, lr=cyclic))


def test_only_the_first_ramp_of_the_learning_rate_is_a_warmup():
    # A Keras-style 60-epoch run: the learning rate decays, then climbs (a schedule gone wrong); the
    # loss, still near where it started, stalls as it climbs. That climb is no warm-up.
    loss = np.concatenate([np.linspace(2.3, 2.0, 30), np.full(30, 2.0)])
    lr = np.concatenate([np.linspace(3e-3, 4e-4, 30), np.linspace(4e-4, 1.2e-2, 30)])
    eps = episodes_of(analyze(train_loss=loss, lr=lr), "CS301")
    assert eps and eps[0].start_step >= 30
    # The same learning rate rising from the start is a warm-up: the flat loss waits for it.
    assert "CS301" not in codes(analyze(train_loss=np.full(30, 2.3), lr=np.linspace(4e-4, 1.2e-2, 30)))


def test_val_stagnation_is_the_article_rule():
    val = np.concatenate([np.linspace(2.0, 1.0, 20), np.full(15, 0.9)])
    eps = episodes_of(analyze(val_loss=val), "CS302")
    assert [e.start_step for e in eps] == [30]  # 10 earlier values within 0.001
    assert "CS302" not in codes(analyze(val_loss=np.linspace(2.0, 1.0, 40)))
    # Still settling, by 0.0007 over 10 evaluations (a healthy run under a decayed learning rate), is
    # stagnation to the article, not by default: the default tolerance is 0.0005.
    settling = np.concatenate([np.linspace(2.0, 1.0, 20), 0.9 - 0.00007 * np.arange(15)])
    assert "CS302" not in codes(analyze(val_loss=settling))
    article = episodes_of(analyze(article_config(), val_loss=settling), "CS302")
    assert [e.start_step for e in article] == [30]


def test_val_stagnation_reads_where_the_run_started_from_the_train_loss_too():
    # A first evaluation after much learning (0.05, the train loss started at 1.4), then a validation
    # loss converged near zero, within 0.0005 for 10 evaluations: under 5 % of where the run started,
    # no stagnation. Without a train loss the first evaluation is the start, and 0.004 is not under 5 %
    # of it; scan and the monitor alike.
    val = np.concatenate([np.geomspace(0.05, 0.004, 15), np.full(15, 0.004)])
    train = np.geomspace(1.4, 1e-3, 30)
    assert starts_both("CS302", train_loss=train, val_loss=val) == ([], [])
    assert starts_both("CS302", val_loss=val) == ([24], [24])
    # A validation loss stuck well above that level still stagnates.
    assert starts_both("CS302", train_loss=train, val_loss=val * 100) == ([24], [24])


def test_overfitting_is_the_article_rule_when_selected():
    train = np.linspace(1.0, 0.01, 30)
    val = np.full(30, 0.4)
    selected = Config(select=("CS401",))
    eps = episodes_of(analyze(selected, train_loss=train, val_loss=val), "CS401")
    assert eps and eps[0].severity == "warning"
    first = int(np.argmax((train < 0.1) & (val > 5 * train)))
    assert eps[0].start_step == first
    assert "CS401" not in codes(analyze(train_loss=train, val_loss=val))  # opt-in
    assert "CS401" not in codes(analyze(selected, train_loss=train, val_loss=train * 1.2))
    (article,) = episodes_of(analyze(article_config(), train_loss=train, val_loss=val), "CS401")
    assert article.severity == "critical" and article.start_step == first


def test_val_divergence_flags_the_onset_within_a_few_evaluations():
    steps = np.arange(0, 3000, 100)
    val = np.concatenate([np.linspace(1.0, 0.5, 15), 0.5 + 0.04 * np.arange(1, 16)])
    train = np.linspace(1.0, 0.05, 3000)
    from support.helpers import series

    result = analyze(train_loss=train, val_loss=series(val, steps))
    eps = episodes_of(result, "CS402")
    assert eps
    onset = steps[14]
    evaluations_late = (eps[0].start_step - onset) // 100
    assert 1 <= evaluations_late <= 3
    healthy = analyze(train_loss=train, val_loss=series(np.linspace(1.0, 0.4, 30), steps))
    assert "CS402" not in codes(healthy)


def test_a_validation_loss_near_zero_wandering_up_is_no_overfitting():
    # An easy task: the train loss falls from 1.4 to 1e-5, the validation loss to 4e-5, then rises 4x
    # to 1.6e-4 (0.01 % of the run's start) while the train loss falls on. Risen 10 % of that start
    # it is overfitting; scan and the monitor alike, and with `min_rise_start` 0 both fire.
    train = np.concatenate([np.geomspace(1.4, 2e-5, 30), np.geomspace(2e-5, 1e-5, 30)])
    val = np.concatenate([np.geomspace(0.5, 4e-5, 30), np.geomspace(4e-5, 1.6e-4, 30)])
    assert starts_both("CS402", train_loss=train, val_loss=val) == ([], [])
    batch, online = starts_both("CS402", train_loss=train, val_loss=val + np.maximum(np.arange(60) - 29, 0) * 0.02)
    assert batch == online and batch and batch[0] <= 33
    off = Config(params={"CS402": dataclasses.replace(RULES["CS402"].default_params(), min_rise_start=0.0)})
    batch, online = starts_both("CS402", off, train_loss=train, val_loss=val)
    assert batch == online and batch


def test_a_train_loss_summed_over_the_batch_leaves_the_validation_rules_their_own_scale():
    # The train loss summed over batches of 64 (64x the validation loss, averaged): where the run
    # started is read from the validation loss alone, as before the train loss's start was read at
    # all; overfitting and a stuck validation loss are told, scan and the monitor alike, and a
    # validation loss that never learnt is not judged against a train loss on another scale.
    t = np.arange(300)
    train = 64 * (0.05 + 2.25 * np.exp(-t / 30))
    learnt = 0.4 + 1.9 * np.exp(-t[:150] / 30)
    rising = np.concatenate([learnt, learnt[-1] + 0.002 * np.arange(1, 151)])
    batch, online = starts_both("CS402", train_loss=train, val_loss=rising)
    assert batch == online and batch
    stuck = np.concatenate([learnt, np.full(150, learnt[-1])])
    batch, online = starts_both("CS302", train_loss=train, val_loss=stuck)
    assert batch == online and batch
    assert starts_both("CS404", train_loss=train, val_loss=np.full(300, 2.3)) == ([], [])


def test_a_validation_loss_that_jumps_is_told_as_a_jump_not_overfitting():
    # The train loss falls; the validation loss learns, then jumps 3.3x within two evaluations and stays
    # (eval-mode BatchNorm statistics gone wrong): told as a jump, with advice about the evaluation. A
    # gradual rise of 4 % an evaluation, overfitting's, is told as overfitting; batch and monitor agree.
    from tb_crash_signals.analysis.incidents import ADVICE, VAL_JUMP_ADVICE, build_incidents
    from tb_crash_signals.online.monitor import Monitor

    train = np.linspace(1.0, 0.05, 60)
    learnt = list(np.linspace(1.0, 0.3, 30))
    cases = {"jump": learnt + [0.5, 1.0] + [1.0] * 28, "gradual": learnt + list(0.3 * 1.04 ** np.arange(1, 31))}
    for name, val in cases.items():
        result = analyze(train_loss=train, val_loss=val)
        (first, *_) = episodes_of(result, "CS402")
        m = Monitor()
        for step in range(60):
            m.update(step, train_loss=float(train[step]), val_loss=float(val[step]))
        online = [e for e in m.episodes() if e.code == "CS402"]
        assert [(e.start_step, e.message) for e in online] == [(e.start_step, e.message)
                                                               for e in episodes_of(result, "CS402")]
        (incident,) = [i for i in build_incidents(result.episodes, 60) if i.kind == "overfit"]
        if name == "jump":
            assert "after a jump of 3.33x within two evaluations" in first.message, first.message
            assert incident.advice == VAL_JUMP_ADVICE
        else:
            assert "jump" not in first.message and incident.advice == ADVICE["overfit"]


def test_val_divergence_tells_a_jump_only_from_the_rise_it_opens_in():
    # With `evaluations` 0 an episode may open at an evaluation outside any rise: the validation loss
    # jumped 10x once and came back near its best, and a later episode (the train loss rose, then fell
    # again) opens at 1.04x the best. Its note has no jump: the Monitor once carried the old rise's.
    t = np.arange(60)
    steps = t * 10
    train = np.where(t < 20, 2.0 * np.exp(-t / 15.0),
                     np.where(t < 30, 6.0 * np.exp(-20 / 15.0), 0.2 * np.exp(-(t - 30) / 15.0)))
    val = np.concatenate([np.linspace(2.0, 0.5, 8), [5.0], np.full(21, 0.52)])
    params = dataclasses.replace(RULES["CS402"].default_params(), evaluations=0, min_evaluations=3, cooldown=1)
    config = Config(params={"CS402": params})
    batch = episodes_of(analyze(config, train_loss=series(train, steps), val_loss=series(val, steps[::2])), "CS402")
    monitor = Monitor(config)
    for i, step in enumerate(steps.tolist()):
        monitor.update(step, train_loss=float(train[i]), **({"val_loss": float(val[i // 2])} if i % 2 == 0 else {}))
    online = [e for e in monitor.episodes() if e.code == "CS402"]
    assert [(e.start_step, e.message) for e in online] == [(e.start_step, e.message) for e in batch]
    assert len(batch) == 2 and "after a jump of 10x" in batch[0].message and "jump" not in batch[1].message


def test_val_divergence_after_a_warm_restart_is_the_schedule():
    # Cosine annealing to 1 % of its peak over 30 evaluations, then a warm restart: the validation
    # loss, at its best at the end of the cycle, rises 20 % under the larger steps and falls again.
    t = np.arange(60)
    sgdr = 1e-3 * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * (t % 30) / 30)))
    val = np.concatenate([np.linspace(1.0, 0.5, 30), [0.6, 0.62, 0.61, 0.6, 0.58], np.linspace(0.56, 0.45, 25)])
    train = np.linspace(1.0, 0.3, 60)
    assert starts_both("CS402", train_loss=train, val_loss=val, lr=sgdr) == ([], [])
    # The same curves under a constant rate, or a warm-up's rate still rising at the best (it had
    # not fallen): overfitting's onset.
    batch, online = starts_both("CS402", train_loss=train, val_loss=val, lr=np.full(60, 1e-3))
    assert batch == online == [31]
    warmup = 1e-3 * np.minimum((t + 1) / 40, 1.0)
    batch, online = starts_both("CS402", train_loss=train, val_loss=val, lr=warmup)
    assert batch == online == [31]


def test_update_ratio_out_of_band_both_ways():
    high = np.full(50, 1e-3)
    high[20:30] = 0.5
    eps = episodes_of(analyze(update_ratio=high), "CS501")
    assert eps and eps[0].start_step == 22  # third point in a row
    low = np.full(50, 1e-3)
    low[30:] = 1e-7
    assert [e.start_step for e in episodes_of(analyze(update_ratio=low), "CS502")] == [37]  # eighth
    # A converged run's updates dip under the band for a few points: no warning.
    dips = np.full(50, 1e-3)
    dips[[20, 21, 22, 30, 31, 32, 33, 34]] = 8e-6
    assert "CS502" not in codes(analyze(update_ratio=dips))
    assert not codes(analyze(update_ratio=np.full(50, 1e-3))) & {"CS501", "CS502"}


def test_updates_too_small_on_a_loss_that_learnt_everything_are_no_misconfiguration():
    # A training set memorised: the loss falls from 0.5 to 1e-10 and the updates shrink with its
    # gradient, under the band from step 60. Raising the learning rate would be the wrong advice. The
    # same updates under a loss that stays near its start (a learning rate far too low) still warn;
    # scan and the monitor alike (the loss is logged every step, the update ratio every other).
    t = np.arange(120)
    memorised = 0.5 * np.exp(-t / 5.0)
    stuck = np.full(120, 0.5) * (1 + 0.01 * np.sin(t))
    below_zero = 0.5 - t / 60.0  # a loss that can go negative fell no decades
    ratio = np.where(t < 60, 1e-3, 1e-8)
    steps = np.arange(0, 120, 2)
    for loss, warned in ((memorised, []), (stuck, [74]), (below_zero, [74])):
        data = {"train_loss": loss, "update_ratio": series(ratio[steps], steps=steps)}
        assert [e.start_step for e in episodes_of(analyze(**data), "CS502")] == warned
        m = Monitor()
        for i in range(120):
            m.update(i, train_loss=float(loss[i]), **({"update_ratio": float(ratio[i])} if i % 2 == 0 else {}))
        assert [e.start_step for e in m.episodes() if e.code == "CS502"] == warned
    off = dataclasses.replace(RULES["CS502"].default_params(), converged=0.0)
    data = {"train_loss": memorised, "update_ratio": series(ratio[steps], steps=steps)}
    assert [e.start_step for e in episodes_of(analyze(Config(params={"CS502": off}), **data), "CS502")] == [74]


def test_learning_rate_anomalies():
    lr = np.full(40, 1e-3)
    lr[25:] = 0.0
    assert [e.start_step for e in episodes_of(analyze(lr=lr), "CS511")] == [27]
    lr_end = np.linspace(1e-3, 0.0, 40)  # a schedule reaching 0 on its last step
    assert "CS511" not in codes(analyze(lr=lr_end))

    jump = np.full(40, 1e-4)
    jump[20:] = 1e-2
    assert [e.start_step for e in episodes_of(analyze(lr=jump), "CS512")] == [20]
    warmup = np.concatenate([np.linspace(1e-6, 1e-3, 10), np.full(30, 1e-3)])
    assert "CS512" not in codes(analyze(lr=warmup))

    # Warm restarts (SGDR): the learning rate jumps back to the peak it trained at, each period.
    t = np.arange(120)
    sgdr = 1e-3 * 0.5 * (1 + np.cos(np.pi * (t % 30) / 30)) + 1e-6
    assert "CS512" not in codes(analyze(lr=sgdr))
    any_jump = Config(params={"CS512": dataclasses.replace(RULES["CS512"].default_params(), above_peak=0.0)})
    assert [e.start_step for e in episodes_of(analyze(lr=sgdr, config=any_jump), "CS512")] == [30, 60, 90]
    # A restart 10x past the peak before it is no schedule.
    high = sgdr.copy()
    high[60:] *= 10
    assert [e.start_step for e in episodes_of(analyze(lr=high), "CS512")] == [60]

    rising = np.concatenate([np.linspace(1e-3, 1e-4, 20), np.linspace(1e-4, 5e-3, 20)])
    assert episodes_of(analyze(lr=rising), "CS513")
    cyclic = np.tile(np.concatenate([np.linspace(1e-4, 1e-3, 10), np.linspace(1e-3, 1e-4, 10)]), 4)
    assert "CS513" not in codes(analyze(lr=cyclic))


def test_a_learning_rate_leaping_far_above_its_peak_is_critical():
    lr = np.full(60, 2e-3)
    lr[30:] = 0.1  # 50x: a scheduler restart gone wrong
    (leap,) = episodes_of(analyze(lr=lr), "CS514")
    assert (leap.start_step, leap.severity) == (30, "critical")
    assert leap.message.startswith("learning rate leapt 0.002 -> 0.1 at step 30")
    assert [e.start_step for e in episodes_of(analyze(lr=lr), "CS512")] == [30]  # the jump's warning too
    # 10x above the peak: a jump (CS512's warning), no leap.
    ten = np.full(60, 2e-3)
    ten[30:] = 2e-2
    assert "CS514" not in codes(analyze(lr=ten)) and "CS512" in codes(analyze(lr=ten))
    # A climb to far above the peak point by point is no leap (CS513 tells a rate rising after decay).
    ramp = np.concatenate([np.full(20, 1e-3), np.geomspace(1e-3, 1e-1, 40)])
    assert "CS514" not in codes(analyze(lr=ramp))
    # From zero, and within the warm-up: no peak to leap over.
    from_zero = np.concatenate([np.zeros(10), np.full(30, 1e-3)])
    assert "CS514" not in codes(analyze(lr=from_zero))
    coarse = np.concatenate([[1e-5], np.full(40, 1e-3)])  # a schedule's first point far under its rate
    assert "CS514" not in codes(analyze(lr=coarse))
    # The monitor, point by point, fires at the same step, before the loss could show anything.
    m = Monitor()
    for step, v in enumerate(lr):
        m.update(step, lr=float(v), train_loss=1.0)
    assert [(e.start_step, e.severity) for e in m.episodes() if e.code == "CS514"] == [(30, "critical")]
    assert m.should_stop
    # Right after an infinite point the leap is over the finite peak, as the monitor's screen must see.
    after_inf = np.full(40, 1e-5)
    after_inf[20], after_inf[21:] = np.inf, 1e6
    assert starts_both("CS514", lr=after_inf) == ([21], [21])


def test_hits_merge_into_one_episode_per_incident():
    g = healthy_grad(500)
    g[300:340] = 500.0
    g[310] = 50.0  # a dip under the threshold does not split the incident
    assert len(episodes_of(analyze(grad_norm=g), "CS101")) == 1


def test_config_changes_parameters_severity_and_selection():
    g = healthy_grad(300)
    g[100] = 60.0
    cfg = Config(
        params={"CS101": dataclasses.replace(RULES["CS101"].default_params(), threshold=50.0)},
        severities={"CS101": "warning"},
    )
    eps = episodes_of(analyze(config=cfg, grad_norm=g), "CS101")
    assert eps and eps[0].severity == "warning"
    only = Config(select=("CS0",))
    assert codes(analyze(config=only, grad_norm=g * 10)) <= {"CS001", "CS002"}


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_tiny_and_degenerate_series_never_raise(n):
    values = np.linspace(1.0, 0.5, n)
    for data in (
        dict(train_loss=values, val_loss=values, grad_norm=values, lr=values, update_ratio=values),
        dict(train_loss=np.full(n, np.nan), grad_norm=np.full(n, np.inf)),
        dict(train_loss=np.zeros(n), lr=np.zeros(n), update_ratio=np.zeros(n)),
        dict(train_loss=-np.ones(n), grad_norm=np.full(n, 1e308)),
    ):
        analyze(**data)


def test_an_exponential_learning_rate_is_told_on_a_log_scale():
    from tb_crash_signals.analysis.rules.plateau import exponential

    t = np.arange(41)
    assert exponential(1e-4 * 100 ** (t / 40), 40)  # even on a log scale
    assert exponential(1e-4 * 100 ** (t // 8 * 8 / 40), 40)  # a staircase: its halves tell
    assert not exponential(1e-4 + 1e-3 * t / 40, 40)  # linear from ~0: mostly early on a log scale
    assert not exponential(1.0 + 0.5 * t / 40, 40)  # under 2x: a near-constant rate
    # A cosine from 1/25 of its peak over 120 points: at its 40th point its halves rise alike
    # (1.03x), its quarters do not (1.8x).
    cosine = 1 / 25 + (1 - 1 / 25) * (1 - np.cos(np.pi * t / 120)) / 2
    assert not exponential(cosine, 40)
    for bad in (math.nan, math.inf, 0.0, -1.0):
        for at in (0, 20, 40):
            lr = 1e-4 * 100 ** (t / 40)
            lr[at] = bad
            assert not exponential(lr, 40)


def test_the_divergence_noise_bar_takes_a_level_at_or_under_zero():
    # Found by bench/fuzz.py: a loss that goes negative under a positive (denormal) best level made
    # CS113's log of their ratio raise. Such a level stands no ratio above the best: not out of noise
    # (with a known spread), and the array version agrees point by point.
    from tb_crash_signals.analysis.rules.divergence import out_of_noise, out_of_noise_at

    p = RULES["CS113"].default_params()
    levels = np.array([-1.0, 0.0, -0.0, 1e-300, 3.0])
    bests = np.array([5e-324, 0.5, 0.5, 1e-300, 1.0])
    spreads = np.array([1034.4, 0.1, 0.1, 0.1, 0.1])
    one_by_one = [out_of_noise(float(lv), float(b), float(s), p) for lv, b, s in zip(levels, bests, spreads)]
    assert one_by_one == [False, False, False, False, True]
    assert out_of_noise_at(levels, bests, spreads, p).tolist() == one_by_one
    assert out_of_noise(-1.0, 5e-324, float("nan"), p)  # an unknown spread: the level is let through, as before


def test_a_training_set_learnt_by_heart_is_told_whether_or_not_the_validation_loss_rises():
    # The train loss falls from 2.3 to 1e-5 (logged every step); the validation loss, evaluated
    # every 20 steps, stays at 2.0 (learnt nothing), or falls with it to 0.05 (an easy task: a
    # healthy run whose train loss also falls three decades). CS403 tells the first only, from the
    # first evaluation after the train loss's 9-point level reached a thousandth of its start;
    # scan and the monitor alike. The validation loss never rises: CS402 has nothing to say.
    t = np.arange(400)
    train = 2.3 * np.exp(-t / 30.0)
    evals = np.arange(0, 400, 20)
    level = np.array([np.median(train[max(0, i - 8):i + 1]) for i in t])
    first = int(evals[np.flatnonzero(level[evals] <= 1e-3 * np.median(train[:10]))[0]])
    for val, told in ((np.full(evals.size, 2.0), [first]), (0.05 + 2.0 * np.exp(-evals / 40.0), [])):
        data = {"train_loss": train, "val_loss": series(val, steps=evals)}
        result = analyze(**data)
        assert [e.start_step for e in episodes_of(result, "CS403")] == told
        assert not episodes_of(result, "CS402")
        m = Monitor()
        for i in t:
            m.update(int(i), train_loss=float(train[i]), **({"val_loss": float(val[i // 20])} if i % 20 == 0 else {}))
        assert [e.start_step for e in m.episodes() if e.code == "CS403"] == told
    stuck = analyze(train_loss=train, val_loss=series(np.full(evals.size, 2.0), steps=evals))
    (incident,) = [i for i in stuck.incidents if i.kind == "overfit"]
    assert incident.headline.endswith("the model learnt its training set by heart")
    # A validation loss that learnt to 0.3x the train loss's start, then rose back to 0.6x: it learnt,
    # then overfit (CS402's story), though it now stands over CS403's bar.
    rose = np.concatenate([np.linspace(1.5, 0.7, 5), np.linspace(0.75, 1.4, evals.size - 5)])
    data = {"train_loss": series(train), "val_loss": series(rose, steps=evals)}
    assert starts_both_at("CS403", data) == ([], [])
    assert episodes_of(analyze(**data), "CS402")


def test_a_validation_loss_that_never_learnt_while_the_train_loss_did_is_told():
    # Labels shuffled apart from their inputs: the train loss learns the training set slowly (1.8 ->
    # 1.4, logged every step) while the validation loss, evaluated every 20 steps, stays at chance and
    # creeps up: CS404 from the first evaluation after the train loss's 9-point level reached 0.9x its
    # start (and from the 5th evaluation), scan and the monitor alike. A first evaluation after much
    # learning (0.3, the train loss started at 1.8) that then stays is measured against the train
    # loss's start: no story. A validation loss that learns with the train loss: none either.
    t = np.arange(400)
    train = 1.8 - 0.4 * t / 400
    evals = np.arange(0, 400, 20)
    level = np.array([np.median(train[max(0, i - 8):i + 1]) for i in t])
    first = int(evals[np.flatnonzero((level[evals] <= 0.9 * np.median(train[:10])) & (np.arange(evals.size) >= 4))[0]])
    cases = ((1.8 + 0.002 * evals, [first]), (np.full(evals.size, 0.3), []), (1.8 * np.exp(-evals / 200.0), []))
    for val, told in cases:
        data = {"train_loss": train, "val_loss": series(val, steps=evals)}
        assert [e.start_step for e in episodes_of(analyze(**data), "CS404")] == told
        m = Monitor()
        for i in t:
            m.update(int(i), train_loss=float(train[i]), **({"val_loss": float(val[i // 20])} if i % 20 == 0 else {}))
        assert [e.start_step for e in m.episodes() if e.code == "CS404"] == told
    result = analyze(train_loss=train, val_loss=series(1.8 + 0.002 * evals, steps=evals))
    (incident,) = [i for i in result.incidents if i.kind == "overfit"]
    assert incident.headline.startswith("validation loss has learnt nothing: its best 1.8 is still where training")
    assert incident.advice == RULES["CS404"].advice
    # Epoch means (Keras): the first epoch learnt most of the task (its mean 0.6, the validation loss 0.30
    # after it), the train loss then falls on while the validation loss stays near 0.29: overfitting from
    # the second epoch, not a validation loss that never learnt; the train loss's first point is where
    # training started (the median of its first ten epochs, 0.255, already learnt).
    epochs = np.arange(30)
    train_means = np.concatenate([[0.6, 0.35], 0.3 * 0.96 ** np.arange(28)])
    val_flat = 0.29 + 0.01 * (epochs % 2)
    assert starts_both("CS404", train_loss=train_means, val_loss=val_flat) == ([], [])
    # Only the validation loss, or its first evaluation NaN: nothing to compare with, or the train loss's start.
    assert starts_both("CS404", val_loss=np.full(30, 1.8)) == ([], [])
    nan_first = np.concatenate([[np.nan], np.full(29, 1.8)])
    batch, online = starts_both("CS404", train_loss=np.linspace(1.8, 1.4, 30), val_loss=nan_first)
    assert batch == online and batch


def test_a_validation_loss_that_never_learnt_heads_the_overfit_story_or_joins_a_stall():
    from tb_crash_signals.analysis.episodes import Episode
    from tb_crash_signals.analysis.incidents import build_incidents

    def ep(code, family, start, end, message, severity="warning", signal="val_loss"):
        return Episode(code=code, rule=code, family=family, severity=severity, signal=signal, start_step=start,
                       end_step=end, peak_step=start, peak_value=1.0, open=False, message=message, advice=code)

    rise = ep("CS402", "overfit", 300, 900, "validation loss rose")
    never = ep("CS404", "overfit", 500, 900, "validation loss has learnt nothing")
    (overfit,) = build_incidents([rise, never], 1000)
    assert overfit.headline == "validation loss has learnt nothing" and overfit.advice == "CS404"
    assert overfit.first_alarm_step == 300  # the first alarm is still the rise's
    stall = ep("CS301", "plateau", 100, 900, "train loss has not improved, near where it started", signal="train_loss")
    (plateau,) = build_incidents([stall, never], 1000)
    assert plateau.kind == "plateau" and plateau.headline.endswith("; the validation loss learnt nothing either")
    note = ep("CS301", "plateau", 100, 200, "a slow start", severity="info", signal="train_loss")
    assert sorted(i.kind for i in build_incidents([note, never], 1000)) == ["overfit", "plateau"]


# A 3-class classifier's per-batch loss at chance (ln 3) for its first steps, smooth to within a few
# per cent, under a linear warm-up of Adam's rate (a real run of bench/detection/torch_runs.py
# `overshoots`, which learnt to 0.2 over the next 30 steps and diverged 200 steps later).
_AT_CHANCE = [1.088, 1.12, 1.109, 1.076, 1.074, 1.044, 0.985, 0.948, 0.981, 0.925, 1.036, 1.152, 1.122, 1.035,
              1.086, 1.085, 0.897, 0.94, 0.854, 0.816]


def test_no_early_loss_growth_alarm_on_a_loss_still_within_the_range_it_started_in():
    lr = (np.arange(len(_AT_CHANCE)) + 1) * 4.3e-4
    # Its 3-point level went 1.11 -> 0.95 -> 1.09 with the rate rising: 1.15x its lowest, out of the
    # jitter of a smooth loss, but under where it started: no progress lost, nothing climbed.
    assert starts_both("CS202", train_loss=_AT_CHANCE, lr=lr) == ([], [])
    off = Config(params={"CS202": dataclasses.replace(RULES["CS202"].default_params(), early_left=0.0)})
    assert starts_both("CS202", off, train_loss=_AT_CHANCE, lr=lr) == ([14], [14])
    # Out of that range, the same climb is told at once.
    above = _AT_CHANCE[:14] + [1.2, 1.3, 1.45, 1.6, 1.8, 2.0]
    assert starts_both("CS202", train_loss=above, lr=lr) == ([14], [14])
    # And a loss that learnt a third of its start (under `early_left` x it) and climbs back is told
    # before it is back there: an epoch-level run whose exponential rate throws it off.
    learnt = [2.31, 2.27, 2.25, 2.18, 2.09, 1.89, 1.59, 1.52, 1.45, 1.42, 1.44, 1.52, 1.48, 1.45, 1.44, 1.53, 1.57,
              1.63, 1.66, 1.71, 1.74, 1.72, 1.85, 1.96, 1.97, 2.0]
    lr = 1e-3 * 1.24 ** np.arange(len(learnt))
    batch, online = starts_both("CS202", train_loss=learnt, lr=lr)
    assert batch == online and batch and learnt[batch[0]] < learnt[0]


def _sparse_starts(loss, every=50, config=None):
    """CS118's episode starts on a loss logged every `every` steps: from the batch rules, and from a
    Monitor fed the same points."""
    steps = (np.arange(len(loss)) + 1) * every - 1
    batch = [e.start_step for e in episodes_of(analyze(config, train_loss=series(loss, steps)), "CS118")]
    m = Monitor(config)
    for s, v in zip(steps.tolist(), loss):
        m.update(s, train_loss=float(v))
    return batch, [e.start_step for e in m.episodes() if e.code == "CS118"]


# A classifier's loss logged every 50 steps (Lightning's default): it learns for 8 points, then climbs
# away under a learning rate too high (a negative weight decay, an exponential schedule).
_SPARSE_CLIMB = [2.3, 1.6, 1.1, 0.9, 0.8, 0.74, 0.71, 0.70, 0.86, 1.3, 1.9, 2.4, 2.6, 2.7]


def test_a_loss_logged_every_50_steps_that_lost_what_it_learnt_is_critical_within_a_few_points():
    batch, online = _sparse_starts(_SPARSE_CLIMB)
    # 3-point medians against the best 5-point median 0.74 and the initial level 2.3 (its first
    # point): 1.3 at step 549 has not lost half of the progress, 1.9 at step 599 has.
    assert batch == online == [599]
    # Asked for two points in a row, the next one (2.4 at step 649).
    twice = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), consecutive=2)})
    assert _sparse_starts(_SPARSE_CLIMB, config=twice) == ([649], [649])
    message = episodes_of(analyze(train_loss=series(_SPARSE_CLIMB, (np.arange(14) + 1) * 50 - 1)), "CS118")[0]
    assert message.severity == "critical" and "x its best level" in message.message
    # The sustained divergence's 31 points are far off: alone, it would say nothing.
    assert "CS113" not in codes(analyze(train_loss=series(_SPARSE_CLIMB, (np.arange(14) + 1) * 50 - 1)))


def test_a_sparse_loss_climbing_point_after_point_under_a_rising_learning_rate_is_judged_at_its_last_point():
    # Logged every 50 steps, an exponential learning rate: the loss learnt to ~0.18, then climbs 0.18 ->
    # 0.19 -> 0.24 -> 0.42 -> 1.2. Its 3-point median lags a point behind (0.24 at step 849, 1.35x the
    # best); the point that ends three rises in a row while the rate rose is the level itself there.
    loss = [0.27, 0.25, 0.21, 0.16, 0.21, 0.3, 0.19, 0.24, 0.26, 0.23, 0.17, 0.18, 0.27, 0.18, 0.19, 0.24,
            0.42, 1.17, 1.5, 1.0]
    steps = (np.arange(len(loss)) + 1) * 50 - 1
    rising = 0.01 * 1.23 ** np.arange(len(loss))
    data = {"train_loss": series(loss, steps), "lr": series(rising, steps)}
    assert starts_both_at("CS118", data) == ([int(steps[16])], [int(steps[16])])
    # The same climb under a constant rate, or with the rule's `climb` off: its median tells it a point later.
    flat = {"train_loss": series(loss, steps), "lr": series(np.full(len(loss), 0.01), steps)}
    assert starts_both_at("CS118", flat) == ([int(steps[17])], [int(steps[17])])
    off = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), climb=0)})
    assert starts_both_at("CS118", data, off) == ([int(steps[17])], [int(steps[17])])
    # Three rises in a row within the loss's noise, the rate rising: nothing.
    noisy = [0.27, 0.25, 0.21, 0.16, 0.21, 0.3, 0.19, 0.24, 0.26, 0.23, 0.17, 0.18, 0.27, 0.18, 0.19, 0.22,
             0.28, 0.2, 0.19, 0.21]
    assert starts_both_at("CS118", {"train_loss": series(noisy, steps), "lr": series(rising, steps)}) == ([], [])


def test_a_smooth_loss_logged_at_every_step_is_not_judged_at_the_end_of_a_climb():
    # A tiny GPT-2's per-step loss (smooth: its first 12 points jitter under 0.05) under a warm-up
    # to a rate far too high: five rises in a row to 5.29 at step 39, 2x its best, then back at 3.0
    # within a few steps (its crash comes 20 steps later). One point of a loss logged at every step
    # is one batch: judged as the level itself, that point stopped the run on a spike it came back
    # from. The 3-point median tells no divergence there.
    loss = [3.046, 3.037, 3.008, 2.993, 3.002, 3.008, 2.969, 2.882, 2.888, 2.937, 2.994, 2.905, 2.998, 3.458,
            2.892, 2.75, 2.879, 2.654, 3.393, 3.218, 3.782, 3.259, 2.995, 2.888, 2.869, 2.806, 2.573, 3.158,
            3.339, 3.575, 2.898, 2.879, 2.644, 2.504, 2.507, 2.909, 3.128, 4.058, 5.292, 3.376, 3.134, 3.235,
            3.341, 3.217, 3.014, 2.98, 2.991, 2.944, 2.701, 2.876, 3.101, 2.988]
    steps = np.arange(1, len(loss) + 1)
    rising = np.minimum(steps / 200, 1.0) * 20.0
    data = {"train_loss": series(loss, steps), "lr": series(rising, steps)}
    assert starts_both_at("CS118", data) == ([], [])


def test_the_coarse_climb_is_told_alike_by_the_batch_rule_and_the_monitor():
    # Random sparse losses that learn, some then climbing, under learning rates logged at the loss's
    # cadence, five times as often or half as often, rising, flat or cut to 0: the same episodes.
    # A fifth are smooth epoch means logged at step = epoch (their noise 0.5-3 %).
    rng = np.random.default_rng(0)
    told = 0
    for _ in range(100):
        n = int(rng.integers(8, 40))
        smooth = rng.random() < 0.2
        every = 1 if smooth else int(rng.choice([25, 50, 100]))
        steps = np.arange(n) * every + (0 if smooth else int(rng.integers(0, 50)))
        loss = (2.3 * np.exp(-np.arange(n) / rng.uniform(2, 10)) + rng.uniform(0.05, 1.0)) * np.exp(
            rng.uniform(0.005, 0.03) * rng.standard_normal(n) if smooth else
            rng.uniform(0.0, 0.4) * rng.standard_normal(n))
        if rng.random() < 0.7:
            start = int(rng.integers(3, n))
            loss[start:] *= np.cumprod(np.full(n - start, rng.uniform(1.05, 1.8)))
        if rng.random() < 0.1:
            loss[int(rng.integers(0, n))] = np.nan
        lr_every = max(int(rng.choice([every, every // 5, every * 2])), 1)
        lr_n = int(steps[-1]) // lr_every + 2
        lr = 1e-3 * np.exp(np.arange(lr_n) * rng.uniform(-0.01, 0.1))
        if rng.random() < 0.2:
            lr[int(rng.integers(0, lr_n)):] = 0.0
        batch, online = starts_both_at("CS118", {"train_loss": series(loss, steps),
                                                 "lr": series(lr, np.arange(lr_n) * lr_every)})
        assert batch == online
        told += bool(batch)
    assert told > 20


def test_the_coarse_divergence_reads_sparse_losses_and_smooth_ones_logged_every_step():
    # Logged every 20 steps, the points are neither sparse nor every step's: the rule stays out.
    assert _sparse_starts(_SPARSE_CLIMB, every=20) == ([], [])
    # At every step, smooth (Keras' epoch_loss, at step = epoch): 14 epochs, the climb told at the
    # 13th, the first whose 10 points before its level's window tell their jitter.
    assert _sparse_starts(_SPARSE_CLIMB, every=1) == ([12], [12])
    # The same points with a per-batch loss's noise (30 %): not smooth, not read.
    noisy = np.array(_SPARSE_CLIMB) * np.exp(0.3 * np.random.default_rng(4).standard_normal(len(_SPARSE_CLIMB)))
    assert _sparse_starts(noisy, every=1) == ([], [])
    # Smooth while at chance, then learning noisily (a tiny batch): quiet on its noisy climb.
    rng = np.random.default_rng(6)
    chance_then_noisy = np.concatenate([2.3 * np.exp(0.005 * rng.standard_normal(20)),
                                        0.5 * np.exp(0.5 * rng.standard_normal(40))])
    chance_then_noisy[45:] *= 2.5
    assert _sparse_starts(chance_then_noisy, every=1) == ([], [])
    # Its first 12 points are smooth; the jitter read at the alarm keeps it quiet, and the rule retires
    # at the first later block of 12 points that jitters `noisy_jitter` or more.
    defaults = RULES["CS118"].default_params()
    at_alarm = Config(params={"CS118": dataclasses.replace(defaults, smooth_jitter=10.0)})
    assert _sparse_starts(chance_then_noisy, every=1, config=at_alarm) == ([], [])
    neither = Config(params={"CS118": dataclasses.replace(defaults, smooth_jitter=10.0, noisy_jitter=10.0)})
    batch, online = _sparse_starts(chance_then_noisy, every=1, config=neither)
    assert batch == online and batch


def test_a_smooth_loss_is_read_block_by_block_however_many_points_the_rule_waits_for():
    # Found by the twins' fuzzer (`bench/fuzz.py --only twins`): with `min_points` over 12 the Monitor
    # judged the first block of a smooth loss over all the points it had waited for, and skipped the
    # blocks that ended before them. A smooth fall with one noisy block (points 12-23), then a climb.
    rng = np.random.default_rng(1)
    loss = 2.3 * np.exp(-np.arange(60) / 15) * np.exp(0.01 * rng.standard_normal(60))
    loss[12:24] *= np.exp(0.5 * rng.standard_normal(12))
    loss[45:] *= np.exp(0.4 * np.arange(15))
    defaults = RULES["CS118"].default_params()
    waits = Config(params={"CS118": dataclasses.replace(defaults, min_points=26)})
    assert _sparse_starts(loss, every=1, config=waits) == ([], [])  # retired at the noisy block
    # Not retired by a later block (`noisy_jitter`), both read the first block alone and tell the climb.
    kept = Config(params={"CS118": dataclasses.replace(defaults, min_points=26, noisy_jitter=10.0)})
    batch, online = _sparse_starts(loss, every=1, config=kept)
    assert batch == online and batch and batch[0] >= 45


def test_no_coarse_divergence_while_the_learning_rate_stands_at_zero():
    # A network frozen by a schedule that dropped to 0 at step 199: its per-batch loss, sampled every
    # 50 steps, wanders 0.38-0.95 and its 3-point median doubles its lowest 5-point median.
    loss = [1.2, 0.674, 0.702, 0.469, 0.383, 0.421, 0.529, 0.717, 0.842, 0.598, 0.857, 0.945, 0.614, 0.646]
    steps = (np.arange(len(loss)) + 1) * 50 - 1
    lr = np.where(steps < 199, 0.05, 0.0)
    frozen = {"train_loss": series(loss, steps), "lr": series(lr, steps)}
    assert starts_both_at("CS118", frozen) == ([], [])
    assert "CS511" in codes(analyze(**frozen))  # the rate at 0 is the story
    # The same points under a working learning rate would be told.
    running = {"train_loss": series(loss, steps), "lr": series(np.full(len(loss), 0.05), steps)}
    batch, online = starts_both_at("CS118", running)
    assert batch == online and batch


def test_the_coarse_divergence_ignores_sampled_noise():
    rng = np.random.default_rng(3)
    # A tiny batch's per-step loss near zero, sampled every 50 steps: it spans decades.
    tiny = 0.02 * np.exp(2.5 * rng.standard_normal(40))
    assert _sparse_starts(tiny) == ([], [])
    # A loss at its floor from its first logged point, 25 % noise: its 3-point medians wander 1.3x
    # over their lowest without any divergence.
    flat = 0.15 * np.exp(0.25 * rng.standard_normal(40))
    assert _sparse_starts(flat) == ([], [])
    # A loss that learnt and is noisy at its floor (40 %): its medians wander over half of its
    # progress, within its own noise (`z`).
    learnt = np.concatenate([[2.3, 1.4, 0.9], 0.6 * np.exp(0.4 * np.random.default_rng(2).standard_normal(30))])
    assert _sparse_starts(learnt) == ([], [])


def test_a_best_level_at_zero_ends_the_coarse_divergence():
    # Found by the fuzzer: a loss logged every 50 steps that fired over a best of 1e-300, whose
    # best 5-point median then fell to 0 or under (-0.0, 0.0, -1.8e308 among its points): the
    # Monitor divided by that best for the episode's note. No ratio stands over it: the episode ends.
    # (`within` 1: these points stand among their own, the gate that reads them is not under test.)
    loss = [0.001, 1e-300, 5e-324, math.inf, 1e-300, 0.0, 0.001, 5e-324, 1e-300, math.nan, 1e-300,
            -1.7976931348623157e308, 1e-300, 0.001, -math.inf, 1e300, math.inf, -0.0, 0.0]
    steps = (np.arange(len(loss)) + 1) * 50 - 1
    config = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), within=1.0)})
    with np.errstate(all="ignore"):
        told = episodes_of(analyze(config, train_loss=series(loss, steps)), "CS118")
    batch = [(e.start_step, e.end_step) for e in told]
    m = Monitor(config)
    for s, v in zip(steps.tolist(), loss):
        m.update(s, train_loss=v)
    assert batch == [(e.start_step, e.end_step) for e in m.episodes() if e.code == "CS118"] == [(799, 899)]
    # The same end while a NaN among the level's points makes it NaN (found by a fuzzer of the twins:
    # the batch rule kept the point at 0 inside the divergence, the Monitor ended it there).
    loss = [2.1, 1.6, 3.4, 1.1, 2.9, 0.79, 0.69, 0.59, 0.99, 1.4, 0.42, 5.8, 3.4, math.nan, math.nan, 0.0, 2.5, 0.78]
    steps = (np.arange(len(loss)) + 1) * 25 - 1
    config = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), best_points=1, points=2)})
    with np.errstate(all="ignore"):
        told = episodes_of(analyze(config, train_loss=series(loss, steps)), "CS118")
    batch = [(e.start_step, e.end_step) for e in told]
    m = Monitor(config)
    for s, v in zip(steps.tolist(), loss):
        m.update(s, train_loss=v)
    online = [(e.start_step, e.end_step) for e in m.episodes() if e.code == "CS118"]
    assert batch == online and batch[-1][1] == 324  # its last point before the NaN; 0 at step 399


def test_a_loss_that_learnt_a_decade_is_no_noise_to_the_coarse_divergence():
    rng = np.random.default_rng(5)
    # Logged every 50 steps, it fell a decade over 20 points (15 % noise), rested at 0.1, then
    # jumped 12-16x for good (an LR range test's end): its quartiles lie 0.64 decades apart, but
    # each point sits close to the line through its neighbours.
    fall = 10 ** (-np.arange(20) / 19) * np.exp(0.15 * rng.standard_normal(20))
    floor = 0.1 * np.exp(0.15 * rng.standard_normal(4))
    loss = np.concatenate([fall, floor, [1.2, 1.5, 1.4, 1.6]])
    # The first point up is 8x and more the three before it (`jump`): step 1249.
    assert _sparse_starts(loss) == ([1249], [1249])
    # Read by the quartiles alone, the fall is noise and the climb goes untold.
    quartiles = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), trend_noise=0.0)})
    assert _sparse_starts(loss, config=quartiles) == ([], [])


def test_a_sparse_loss_that_jumps_out_of_its_range_is_critical_at_the_jump():
    # Logged every 50 steps, a regression learnt to ~0.2 (20 % noise), then the exponential learning
    # rate threw it off: 1.6 at step 749, over 5x the largest of the three points before, and higher after.
    rng = np.random.default_rng(8)
    learnt = np.concatenate([[0.9, 0.5, 0.3], 0.2 * np.exp(0.2 * rng.standard_normal(11))])
    loss = np.concatenate([learnt, [1.6, 2.4, 3.1]])
    assert _sparse_starts(loss) == ([749], [749])
    # Without the jump path, the 3-point median tells it a point later.
    no_jump = Config(params={"CS118": dataclasses.replace(RULES["CS118"].default_params(), jump=0.0)})
    assert _sparse_starts(loss, config=no_jump) == ([799], [799])
    episode = episodes_of(analyze(train_loss=series(loss, (np.arange(len(loss)) + 1) * 50 - 1)), "CS118")[0]
    assert episode.severity == "critical" and episode.start_value == 1.6
    best = min(np.median(loss[i - 5:i]) for i in range(5, 15))  # the lowest 5-point median
    assert episode.message.startswith(f"train loss at {fmt(1.6 / best)}x its best level {fmt(best)}")
    assert loss[14] >= 5 * loss[11:14].max()
    # A jump within the range of the points before it is no jump: a tiny batch's loss sampled every 50
    # steps (0.04, 1.3, 0.02, then 1.4: 70x their median, not 5x their largest).
    noisy = np.concatenate([[2.3, 1.4, 0.6, 0.5, 0.09, 1.0, 1.3, 0.04, 0.02], [1.4], [0.01, 0.03]])
    assert _sparse_starts(noisy) == ([], [])
    # Nor a loss whose points before the jump are noise at its scale (their quartiles 0.5 decades
    # apart): the gates of the level hold for the point too.
    sampled_noise = np.concatenate([0.02 * np.exp(2.5 * rng.standard_normal(30)), [5.0]])
    assert _sparse_starts(sampled_noise) == ([], [])
    # Logged at every step, a smooth loss's one point may be one batch: a large batch's loss (3 %
    # noise) that learnt, with an 8x spike gone at the next step, is a spike, not a divergence.
    large_batch = (2.0 * np.exp(-np.arange(300) / 80) + 0.3) * np.exp(0.03 * rng.standard_normal(300))
    large_batch[200] *= 8.0
    assert _sparse_starts(large_batch, every=1) == ([], [])
    assert "CS112" in codes(analyze(train_loss=large_batch))


def _plateau_starts(loss, every, config=None):
    steps = (np.arange(len(loss)) + 1) * every - 1
    batch = [e.start_step for e in episodes_of(analyze(config, train_loss=series(loss, steps)), "CS301")]
    m = Monitor(config)
    for s, v in zip(steps.tolist(), loss):
        m.update(s, train_loss=float(v))
    return batch, [e.start_step for e in m.episodes() if e.code == "CS301"]


def test_a_loss_logged_every_50_steps_stuck_at_its_start_is_a_plateau():
    # A learning rate far too low: the per-batch loss at chance (ln 10) for 1 200 steps, sampled
    # every 50. Its first 15 points are 750 steps: no slow start.
    rng = np.random.default_rng(5)
    stuck = 2.3 * np.exp(0.05 * rng.standard_normal(24))
    batch, online = _plateau_starts(stuck, every=50)
    assert batch == online and len(batch) == 1
    # The same 24 points logged every step are a per-step loss's first 24 steps: a slow start, if
    # anything, on a loss that noisy.
    assert _plateau_starts(stuck, every=1) == ([], [])


def test_a_short_sparse_log_held_at_chance_is_a_plateau_before_its_initial_level_is_known():
    # 16 points logged every 50 steps, a classifier held at chance (ln 10) by a learning rate far too
    # low, its batches 1 % apart: the stall begins among the 10 points that set the initial level,
    # 350 steps after the first, on a loss whose noise is under the 1 % a stall asks.
    rng = np.random.default_rng(7)
    held = 2.3 * np.exp(0.01 * rng.standard_normal(16))
    assert stats.jitter(held) < 0.015
    batch, online = _plateau_starts(held, every=50)
    assert batch == online and len(batch) == 1
    # A noisy regression's 16 points (10 % apart) hold no level to stall against that early.
    noisy = 0.9 * np.exp(0.1 * rng.standard_normal(16))
    assert _plateau_starts(noisy, every=50) == ([], [])
    # Logged every step, the same 16 points are a per-step loss's first steps: a slow start.
    assert _plateau_starts(held, every=1) == ([], [])
    # `sparse_jitter` 0 keeps such a stall to `early_jitter`.
    off = dataclasses.replace(RULES["CS301"].default_params(), sparse_jitter=0.0)
    assert _plateau_starts(held, every=50, config=Config(params={"CS301": off})) == ([], [])


def test_a_loss_logged_every_50_steps_is_told_against_its_first_point():
    # It fell 2.1 -> 1.2 before its second logged point and stays there, noisy: the median of its
    # first 10 points is a level it learnt, not where it started (a healthy run's floor).
    rng = np.random.default_rng(6)
    learnt = np.concatenate([[2.1], 1.2 * np.exp(0.03 * rng.standard_normal(23))])
    assert _plateau_starts(learnt, every=50) == ([], [])
    flat_from_second = np.concatenate([[1.25], learnt[1:]])  # no fall seen: stuck where it started
    batch, online = _plateau_starts(flat_from_second, every=50)
    assert batch == online and len(batch) == 1


def test_a_validation_rise_while_the_train_loss_climbs_back_is_no_overfitting():
    # Logged every 50 steps under an exponential learning rate: the validation loss rises as the
    # train loss does, from step 450; the 5-point median of the train loss lags 250 steps and still
    # stands under its level at the best validation step (1.76), but its last point is 1.6x that.
    steps = np.arange(50, 650, 50) - 1
    train = [2.25, 1.83, 1.76, 1.57, 1.54, 1.54, 1.64, 1.75, 2.82, 2.87, 3.39, 11.9]
    val = [2.2, 1.9, 1.7, 1.55, 1.52, 1.6, 1.62, 1.7, 2.84, 2.9, 3.5, 12.0]
    data = {"train_loss": series(train, steps), "val_loss": series(val, steps + 1)}
    assert starts_both_at("CS402", data) == ([], [])
    # The same validation rise while the train loss keeps falling is overfitting, and is told.
    falling = [2.25, 1.83, 1.76, 1.57, 1.54, 1.5, 1.45, 1.4, 1.36, 1.33, 1.3, 1.28]
    batch, online = starts_both_at("CS402", {"train_loss": series(falling, steps), "val_loss": series(val, steps + 1)})
    assert batch == online and batch


def starts_both_at(code, data, config=None):
    """Where `code`'s episodes start, from the batch rules and a Monitor fed the series' own steps."""
    batch = [e.start_step for e in episodes_of(analyze(config, **data), code)]
    m = Monitor(config)
    by_step = {}
    for sig, s in data.items():
        for step, v in zip(s.steps.tolist(), s.values.tolist()):
            by_step.setdefault(step, {})[sig] = v
    for step in sorted(by_step):
        m.update(step, **by_step[step])
    return batch, [e.start_step for e in m.episodes() if e.code == code]


def test_a_flat_noisy_loss_learnt_nothing_its_lowest_median_is_noise():
    # A fine-tune from a trained model: its per-batch loss flat around 0.25 (log spread 0.45), its
    # first batches a little worse. The lowest of its many 31-point medians sits ~30 % under the
    # median of its first 10 points by noise alone: no fall the run made, nothing it could lose.
    # (What is left is the 9-point median at 2x that lowest median, which such batches reach.)
    # `above_best` off in both: it quiets most such climbs too, and this is `learnt_z`'s part.
    plain = dataclasses.replace(RULES["CS113"].default_params(), above_best=0)
    asked = Config(params={"CS113": plain})
    asked_nothing = Config(params={"CS113": dataclasses.replace(plain, learnt_z=0.0)})
    told = {"default": 0, "learnt_z 0": 0}
    for seed in range(5):
        rng = np.random.default_rng(seed)
        loss = 0.25 * np.exp(0.45 * rng.standard_normal(3000))
        loss[:10] *= 1.35
        told["default"] += len(episodes_of(analyze(asked, train_loss=loss), "CS113"))
        told["learnt_z 0"] += len(episodes_of(analyze(asked_nothing, train_loss=loss), "CS113"))
    assert told["learnt_z 0"] >= 50 and told["default"] <= told["learnt_z 0"] / 10, told


def test_a_noisy_loss_s_level_must_clear_the_noise_of_its_lowest_median_too():
    # A per-step loss that learnt (1.6 -> 0.8 in 300 steps), then stays at its level with a log spread of
    # 0.6 (minibatches of one or two samples). Its best level is the lowest of ~90 31-point medians,
    # biased low by their own noise; its 9-point median reaches 2x that best by noise alone. `z` 3 counts
    # the best's noise with the level's: fewer such climbs than the 2 noise units of the level alone.
    # `above_best` off in both: this is `z`'s part.
    plain = dataclasses.replace(RULES["CS113"].default_params(), above_best=0)
    asked, loose = Config(params={"CS113": plain}), Config(params={"CS113": dataclasses.replace(plain, z=2.0)})
    told = {"default": 0, "z 2": 0}
    for seed in range(5):
        rng = np.random.default_rng(seed)
        t = np.arange(3000)
        loss = np.where(t < 300, 1.6 - 0.8 * t / 300, 0.8) * np.exp(0.6 * rng.standard_normal(t.size))
        told["default"] += len(episodes_of(analyze(asked, train_loss=loss), "CS113"))
        told["z 2"] += len(episodes_of(analyze(loose, train_loss=loss), "CS113"))
    assert told["default"] <= 0.6 * told["z 2"], told


# An epoch's mean loss under a weight decay of the wrong sign: it rises from its very first epoch.
_FROM_START = [0.984, 1.14, 2.04, 3.46, 5.37, 7.68, 10.1, 12.8, 15.4, 18.3, 21.3, 24.1]


def test_a_loss_rising_at_every_point_from_its_first_is_critical_once_it_stands_three_times_there():
    # Point 4 (5.37) ends four rises in a row from the first point and stands 5.5x it.
    assert starts_both("CS119", train_loss=_FROM_START) == ([4], [4])
    (ep,) = episodes_of(analyze(train_loss=_FROM_START), "CS119")
    assert ep.severity == "critical" and ep.end_step == len(_FROM_START) - 1
    assert "5.46x its first point 0.984" in ep.message and "never learnt" in ep.message
    # Asked for 6x, at point 5 (7.68, 7.8x); for 6 rises, at point 6.
    six_times = Config(params={"CS119": dataclasses.replace(RULES["CS119"].default_params(), factor=6.0)})
    assert starts_both("CS119", six_times, train_loss=_FROM_START) == ([5], [5])
    six = Config(params={"CS119": dataclasses.replace(RULES["CS119"].default_params(), rises=6)})
    assert starts_both("CS119", six, train_loss=_FROM_START) == ([6], [6])


def test_a_climb_from_the_first_point_ends_for_good_at_its_first_fall():
    # One epoch that does not rise, before the climb reaches 3x: the rule never fires, whatever follows.
    dipped = _FROM_START[:3] + [1.9] + _FROM_START[3:]
    assert starts_both("CS119", train_loss=dipped) == ([], [])
    # A per-batch loss whose first batch was a lucky one (0.204): it rises three times through ordinary
    # batches (a regression's batches of 8), then falls: nothing.
    lucky = [0.204, 0.534, 0.876, 0.902, 0.719, 1.34, 0.695, 0.502, 1.06, 0.44, 0.642, 0.277, 0.193]
    assert starts_both("CS119", train_loss=lucky) == ([], [])
    # Rising at every point, but slowly (1.2x over the first four): not yet 3x, told once it is.
    slow = [1.0, 1.05, 1.1, 1.15, 1.2, 1.6, 2.2, 3.1, 4.0, 3.0]
    assert starts_both("CS119", train_loss=slow) == ([7], [7])
    # A first point at zero, or NaN, gives no ratio: nothing.
    assert starts_both("CS119", train_loss=[0.0] + _FROM_START[1:]) == ([], [])
    assert starts_both("CS119", train_loss=[math.nan] + _FROM_START[1:]) == ([], [])


def test_the_climb_from_the_start_is_told_alike_by_the_batch_rule_and_the_monitor():
    # Random climbs from the first point, some broken by a dip, a NaN or an Inf, some too slow.
    rng = np.random.default_rng(11)
    told = 0
    for _ in range(200):
        n = int(rng.integers(3, 30))
        loss = rng.uniform(0.01, 5.0) * np.cumprod(rng.uniform(0.95, 1.8, n))
        if rng.random() < 0.2:
            loss[int(rng.integers(0, n))] = rng.choice([np.nan, np.inf, 0.0])
        batch, online = starts_both("CS119", train_loss=loss)
        assert batch == online
        told += bool(batch)
    assert told > 20


def test_a_log_that_begins_past_its_runs_start_is_not_read_from_its_first_point():
    # The same climb logged from step 5000 on, every 10 steps: a job resumed into a new log, whose first
    # point is not where the run began (stats.starts_late); the rule does not run.
    steps = 5000 + 10 * np.arange(len(_FROM_START))
    assert starts_both_at("CS119", {"train_loss": series(_FROM_START, steps)}) == ([], [])
    assert starts_both_at("CS119", {"train_loss": series(_FROM_START, 10 * np.arange(len(_FROM_START)))}) == (
        [40], [40])
