import {test} from 'node:test';
import assert from 'node:assert/strict';
import {
  rankRuns, filterRuns, defaultSelection, countsOf, incidentCountsOf, headlineOf, smoothEMA, canLog, unionSteps, alignTo,
  presentCharts, chartIdFor, stepExtent, chartData, fitLine, fitLabel, episodeBox, nonfiniteMarks, shownFits, projectsAhead, cameBack,
  zoomRange, episodeTitle, tomlString, tomlSnippet, CHARTS, wideRange, isPending, progressOf, pickSelection,
  progressText, lossKindNote, lateStartNote, valByWallTimeNote, perplexityNote,
} from '../src/model.js';

const run = (name, health, extra = {}) => ({run: name, health, ...extra});

test('rankRuns: sick first, stable within a health', () => {
  const runs = [run('a', 'ok'), run('b', 'no_signals'), run('c', 'warning'), run('d', 'critical'), run('e', 'warning'), run('f', 'critical')];
  assert.deepEqual(rankRuns(runs).map((r) => r.run), ['d', 'f', 'c', 'e', 'a', 'b']);
  assert.deepEqual(rankRuns([]), []);
});

test('rankRuns: pending runs after the sick ones, before the healthy ones', () => {
  const runs = [run('a', 'ok'), run('p', 'pending', {pending: true}), run('w', 'warning'), run('n', 'no_signals'), run('c', 'critical', {pending: true})];
  assert.deepEqual(rankRuns(runs).map((r) => r.run), ['c', 'w', 'p', 'a', 'n']);
});

test('isPending: health pending, or a sick run still being updated', () => {
  assert.equal(isPending(run('p', 'pending', {pending: true})), true);
  assert.equal(isPending(run('p', 'pending')), true);
  assert.equal(isPending(run('c', 'critical', {pending: true})), true);
  assert.equal(isPending(run('c', 'critical')), false);
  assert.equal(isPending(run('o', 'ok', {pending: false})), false);
  assert.equal(isPending(null), false);
});

test('progressOf: the payload\'s progress, else counted from its runs', () => {
  assert.deepEqual(progressOf({progress: {analysed: 3, pending: 7, total: 10}, runs: []}), {analysed: 3, pending: 7, total: 10});
  const runs = [run('a', 'ok'), run('p', 'pending', {pending: true}), run('c', 'critical', {pending: true})];
  assert.deepEqual(progressOf({runs}), {analysed: 1, pending: 2, total: 3}); // an older server: no progress
  assert.deepEqual(progressOf({runs, progress: {analysed: 'x'}}), {analysed: 1, pending: 2, total: 3});
  assert.deepEqual(progressOf({}), {analysed: 0, pending: 0, total: 0});
  assert.deepEqual(progressOf(null), {analysed: 0, pending: 0, total: 0});
});

test('progressText: a line while runs are pending, else null', () => {
  assert.equal(progressText({analysed: 120, pending: 880, total: 1000}), 'Analysing at full resolution: 120 of 1000 runs done');
  assert.equal(progressText({analysed: 0, pending: 1, total: 1}), 'Analysing at full resolution: 0 of 1 run done');
  assert.equal(progressText({analysed: 5, pending: 0, total: 5}), null);
  assert.equal(progressText(null), null);
});

test('pickSelection: a user pick stays; an automatic one moves to the first sick run once known', () => {
  const early = [run('p1', 'pending'), run('p2', 'pending'), run('ok', 'ok')];
  assert.equal(pickSelection(early, null, true), 'p1');
  const later = [run('s', 'critical'), run('p2', 'pending'), run('ok', 'ok'), run('p1', 'ok')];
  assert.equal(pickSelection(later, 'p1', true), 's');
  assert.equal(pickSelection(later, 'p1', false), 'p1');
  assert.equal(pickSelection(later, 's', true), 's');
  assert.equal(pickSelection([run('w', 'warning'), run('s', 'critical')], 'w', true), 'w'); // already sick
  assert.equal(pickSelection(early, 'ok', true), 'ok'); // nothing sick yet
  assert.equal(pickSelection(later, 'gone', false), 's');
  assert.equal(pickSelection([], 'x', true), null);
});

test('rankRuns: unknown health sorts last', () => {
  assert.deepEqual(rankRuns([run('x', 'weird'), run('y', 'no_signals')]).map((r) => r.run), ['y', 'x']);
});

test('filterRuns: case-insensitive regex on the name', () => {
  const runs = [run('exp3/lr=3e-3', 'critical'), run('EXP1/baseline', 'ok'), run('other', 'ok')];
  assert.deepEqual(filterRuns(runs, 'exp').runs.map((r) => r.run), ['exp3/lr=3e-3', 'EXP1/baseline']);
  assert.deepEqual(filterRuns(runs, '^exp\\d/b').runs.map((r) => r.run), ['EXP1/baseline']);
  assert.equal(filterRuns(runs, '').runs, runs);
});

test('filterRuns: invalid regex is reported, not thrown, and filters nothing', () => {
  const runs = [run('a', 'ok')];
  const r = filterRuns(runs, 'exp[');
  assert.equal(r.runs, runs);
  assert.equal(r.error, 'invalid regex: Unterminated character class');
  assert.equal(filterRuns(runs, '(').error !== null, true);
});

test('defaultSelection: keeps current, else first sick, else first', () => {
  const runs = [run('a', 'ok'), run('b', 'warning'), run('c', 'critical')];
  assert.equal(defaultSelection(runs, 'a'), 'a');
  assert.equal(defaultSelection(runs, 'gone'), 'b');
  assert.equal(defaultSelection(runs, null), 'b');
  assert.equal(defaultSelection([run('x', 'ok'), run('y', 'no_signals')], null), 'x');
  assert.equal(defaultSelection([], 'x'), null);
});

test('countsOf: from counts or from episodes', () => {
  assert.deepEqual(countsOf({counts: {warning: 3, critical: 1}}), {warning: 3, critical: 1});
  assert.deepEqual(countsOf({counts: {}}), {warning: 0, critical: 0});
  assert.deepEqual(countsOf({episodes: [{severity: 'critical'}, {severity: 'warning'}, {severity: 'warning'}]}), {warning: 2, critical: 1});
  assert.deepEqual(countsOf({episodes: [{severity: 'info'}, {severity: 'warning'}]}), {warning: 1, critical: 0});
});

test('incidentCountsOf: from incident_counts, from incidents, or null before incidents', () => {
  assert.deepEqual(incidentCountsOf({incident_counts: {info: 2, warning: 1, critical: 1}}), {warning: 1, critical: 1});
  assert.deepEqual(incidentCountsOf({incidents: [{severity: 'critical'}, {severity: 'info'}]}), {warning: 0, critical: 1});
  assert.equal(incidentCountsOf({episodes: []}), null);
});

test('headlineOf: server headline wins, fallbacks are one sentence', () => {
  assert.equal(headlineOf({headline: 'grad norm explodes at 4188'}), 'grad norm explodes at 4188');
  assert.equal(headlineOf({summary: {headline: 'from summary'}}), 'from summary');
  assert.equal(headlineOf({health: 'ok'}), 'no crash signals');
  assert.match(headlineOf({health: 'pending'}), /^analysing/);
  assert.match(headlineOf({health: 'no_signals'}), /no loss/);
  assert.equal(
    headlineOf({health: 'critical', counts: {warning: 2, critical: 1}, first_critical_step: 12400}),
    '1 critical finding, 2 warnings; first critical at step 12,400',
  );
});

test('smoothEMA: weight 0 is identity, nulls preserved', () => {
  assert.deepEqual(smoothEMA([1, null, 3], 0), [1, null, 3]);
  assert.deepEqual(smoothEMA(['NaN', 2], 0), [null, 2]);
});

test('smoothEMA: TensorBoard debiased EMA, skipping non-finite', () => {
  const w = 0.6;
  const out = smoothEMA([1, 2, null, 4], w);
  // first value is itself (debiased), as in TensorBoard
  assert.ok(Math.abs(out[0] - 1) < 1e-12);
  let last = 0;
  last = last * w + (1 - w) * 1;
  last = last * w + (1 - w) * 2;
  assert.ok(Math.abs(out[1] - last / (1 - w ** 2)) < 1e-12);
  assert.equal(out[2], null);
  last = last * w + (1 - w) * 4;
  assert.ok(Math.abs(out[3] - last / (1 - w ** 3)) < 1e-12);
});

test('smoothEMA: constant series stays constant; weight clamped', () => {
  for (const v of smoothEMA([5, 5, 5, 5], 0.9)) assert.ok(Math.abs(v - 5) < 1e-9);
  for (const v of smoothEMA([5, 5], 1)) assert.ok(Number.isFinite(v));
  assert.deepEqual(smoothEMA([], 0.5), []);
});

test('canLog: only strictly positive finite values', () => {
  assert.equal(canLog([[1, 2, null]]), true);
  assert.equal(canLog([[1, 0]]), false);
  assert.equal(canLog([[1], [-1]]), false);
  assert.equal(canLog([[null, null]]), false);
});

test('unionSteps and alignTo', () => {
  const xs = unionSteps([1, 3, 5], [2, 3], [null]);
  assert.deepEqual(Array.from(xs), [1, 2, 3, 5]);
  assert.deepEqual(alignTo(xs, [2, 5], [20, null]), [null, 20, null, null]);
  assert.deepEqual(alignTo(xs, [3], ['NaN']), [null, null, null, null]);
});

const ANALYSIS = {
  run: 'r',
  series: {
    train_loss: {steps: [0, 10, 20, 30], values: [2, 1, null, 0.5]},
    val_loss: {steps: [10, 30], values: [1.2, 0.9]},
    grad_norm: {steps: [0, 10, 20, 30], values: [1, 2, 4, 8]},
    lr: {steps: [], values: []},
  },
  episodes: [{code: 'CS201', severity: 'critical', signal: 'grad_norm', start_step: 20, end_step: 30}],
  fits: [{code: 'CS201', signal: 'grad_norm', start_step: 0, end_step: 20, start_value: 1, growth_per_step: Math.log(2) / 10, projected_step: 70, threshold: 100}],
  nonfinite: {train_loss: [{step: 20, value: 'NaN'}]},
  gap_band: {steps: [10, 30], train: [1, 0.5], val: [1.2, 0.9]},
};

test('presentCharts and chartIdFor', () => {
  assert.deepEqual(presentCharts(ANALYSIS).map((c) => c.id), ['loss', 'grad_norm']);
  const charts = presentCharts(ANALYSIS);
  assert.equal(chartIdFor('val_loss', charts), 'loss');
  assert.equal(chartIdFor('grad_norm', charts), 'grad_norm');
  assert.equal(chartIdFor('update_ratio', charts), 'loss'); // chart absent: first chart
  assert.equal(chartIdFor('x', []), null);
});

test('stepExtent covers series, episodes and projected crossings', () => {
  assert.deepEqual(stepExtent(ANALYSIS), {min: 0, max: 70});
  assert.deepEqual(stepExtent({series: {}}), {min: 0, max: 1});
  assert.deepEqual(stepExtent({series: {a: {steps: [5], values: [1]}}}), {min: 4, max: 6});
});

test('chartData: loss chart aligns train/val and the gap band', () => {
  const loss = CHARTS.find((c) => c.id === 'loss');
  const {data, cols, band} = chartData(ANALYSIS, loss, {extent: {min: 0, max: 70}});
  assert.deepEqual(Array.from(data[0]), [0, 10, 20, 30, 70]);
  assert.deepEqual(cols.map((c) => c.role), ['x', 'raw', 'smooth', 'raw', 'smooth', 'gap_val', 'gap_train']);
  assert.deepEqual(data[1], [2, 1, null, 0.5, null]);
  assert.deepEqual(data[3], [null, 1.2, null, 0.9, null]);
  assert.deepEqual(band, [5, 6]);
  assert.deepEqual(data[5], [null, 1.2, null, 0.9, null]);
  for (const col of data.slice(1)) assert.equal(col.length, data[0].length);
});

test('chartData: log mode turns non-positive values into gaps; smoothing changes only smooth columns', () => {
  const a = {series: {grad_norm: {steps: [1, 2, 3], values: [0, 2, 4]}}};
  const gn = CHARTS.find((c) => c.id === 'grad_norm');
  const {data, band} = chartData(a, gn, {log: true, smoothing: 0.5});
  assert.equal(band, null);
  assert.deepEqual(data[1], [null, 2, 4]);
  assert.equal(data[2][0], null);
  assert.ok(data[2][2] < 4 && data[2][2] > 2);
});

test('fitLine: exponential from start to the projected crossing', () => {
  const {steps, values} = fitLine(ANALYSIS.fits[0], 8);
  assert.equal(steps[0], 0);
  assert.equal(steps[steps.length - 1], 70);
  assert.ok(Math.abs(values[0] - 1) < 1e-12);
  assert.ok(Math.abs(values[values.length - 1] - 128) < 1e-9); // doubling every 10 steps for 70 steps
  for (let i = 1; i < values.length; i++) assert.ok(values[i] > values[i - 1]);
});

test('fitLine: no projection ends at end_step; bad fits give nothing', () => {
  const {steps} = fitLine({start_step: 0, end_step: 20, start_value: 1, growth_per_step: 0.1, projected_step: null});
  assert.equal(steps[steps.length - 1], 20);
  assert.deepEqual(fitLine({start_step: 0, start_value: null, growth_per_step: 0.1}), {steps: [], values: []});
});

test('fitLabel', () => {
  assert.equal(fitLabel({end_step: 4120, projected_step: 4155}), 'explodes in ~35 steps');
  assert.equal(fitLabel({end_step: 4120, projected_step: 4121}), 'explodes in ~1 step');
  assert.equal(fitLabel({end_step: 4120, projected_step: 4120}), 'at the threshold');
  assert.equal(fitLabel({end_step: 4120, projected_step: null, doubling_steps: 14.1}), 'doubling every ~14 steps');
});

test('shownFits: every prediction, none made after its incident\'s crash', () => {
  const first = {code: 'CS202', start_step: 18, end_step: 27, projected_step: 70, latest: false};
  const latest = {code: 'CS202', start_step: 20, end_step: 40, projected_step: 75, latest: true};
  const wreck = {code: 'CS202', start_step: 234, end_step: 243, projected_step: 243, latest: true};
  const apart = {code: 'CS201', start_step: 900, end_step: 950, projected_step: 990, latest: true};
  const incidents = [{start_step: 18, end_step: 400, open: false, crash_step: 159}, {start_step: 500, crash_step: null}];
  assert.deepEqual(shownFits([first, latest, wreck, apart], incidents), [first, latest, apart]);
  // an open incident reaches the run's end
  const open = [{start_step: 18, end_step: 400, open: true, crash_step: 159}];
  assert.deepEqual(shownFits([first, apart], open), [first]);
  assert.deepEqual(shownFits([first, wreck]), [first, wreck]);
  assert.deepEqual(shownFits(undefined, incidents), []);
  assert.deepEqual(shownFits([null, first], null), [first]);
});

test('projectsAhead: a crossing still ahead of the fit', () => {
  assert.equal(projectsAhead({end_step: 4120, projected_step: 4155}), true);
  assert.equal(projectsAhead({end_step: 4120, projected_step: 4120}), false);
  assert.equal(projectsAhead({end_step: 4120, projected_step: null}), false);
  assert.equal(projectsAhead({end_step: 'NaN', projected_step: 4155}), false);
});

test('episodeBox: spans, ticks, clipping, visibility', () => {
  assert.deepEqual(episodeBox(10, 50, 100), {visible: true, kind: 'span', left: 10, width: 40});
  assert.deepEqual(episodeBox(10, 12, 100), {visible: true, kind: 'tick', left: 10, width: 0});
  assert.deepEqual(episodeBox(-20, 30, 100), {visible: true, kind: 'span', left: 0, width: 30});
  assert.deepEqual(episodeBox(80, 300, 100), {visible: true, kind: 'span', left: 80, width: 20});
  assert.equal(episodeBox(120, 130, 100).visible, false);
  assert.equal(episodeBox(-30, -10, 100).visible, false);
  assert.equal(episodeBox(NaN, 3, 100).visible, false);
  assert.equal(episodeBox(50, 10, 100).kind, 'span'); // swapped ends
});

test('nonfiniteMarks: edges', () => {
  assert.deepEqual(nonfiniteMarks([{step: 1, value: 'NaN'}, {step: 2, value: 'Infinity'}, {step: 3, value: '-Infinity'}, {step: null, value: 'NaN'}]), [
    {step: 1, value: 'NaN', edge: 'top'},
    {step: 2, value: '+Inf', edge: 'top'},
    {step: 3, value: '-Inf', edge: 'bottom'},
  ]);
  assert.deepEqual(nonfiniteMarks(undefined), []);
});

test('zoomRange: margin around the episode, clipped to the extent', () => {
  const ext = {min: 0, max: 5000};
  const r = zoomRange({start_step: 4120, end_step: 4188}, ext);
  assert.ok(r.min < 4120 && r.max > 4188);
  assert.ok(r.min >= 0 && r.max <= 5000);
  const one = zoomRange({start_step: 0, end_step: 0}, {min: 0, max: 10});
  assert.ok(one.max > one.min);
  const end = zoomRange({start_step: 5000, end_step: null}, ext);
  assert.ok(end.max > end.min);
});

test('episodeTitle: rule, span, peak, message, advice', () => {
  const t = episodeTitle({code: 'CS201', rule: 'grad-norm-growth', severity: 'critical', start_step: 4120, end_step: 4188,
    peak_step: 4188, peak_value: 812.5, message: 'doubling', advice: 'clip'});
  assert.equal(t, 'CS201 grad-norm-growth (critical)\nsteps 4120–4188 · peak 812.5 at 4188\ndoubling\n→ clip');
  assert.match(episodeTitle({code: 'C', rule: 'r', severity: 'warning', start_step: 5, end_step: 5, peak_step: 5, peak_value: null}), /step 5 · peak non-finite at 5/);
});

test('tomlString escapes like a TOML basic string', () => {
  assert.equal(tomlString('a"b\\c'), '"a\\"b\\\\c"');
  assert.equal(tomlString('x\ny'), '"x\\ny"');
});

test('tomlSnippet: maps guessed tags, comments the rest', () => {
  const s = tomlSnippet({r: ['metrics/top1', 'objective/nll_total', 'optim/gnorm']});
  assert.match(s, /^\[signals\]\ntrain_loss = "objective\/nll_total"/);
  assert.match(s, /\ngrad_norm = "optim\/gnorm"/);
  assert.match(s, /\n# val_loss = /);
  assert.match(tomlSnippet({}), /train_loss = "your\/loss\/tag"/);
});

test('wideRange: more than 3 decades of positive values', () => {
  assert.equal(wideRange([[1, 2, 3]]), false);
  assert.equal(wideRange([[0.5, null, 1e4]]), true);
  assert.equal(wideRange([[0, -5, 1]]), false);
  assert.equal(wideRange([[]]), false);
  assert.equal(wideRange([[1], [900]], 3), false);
  assert.equal(wideRange([[1], [2e3]], 3), true);
});

test('storyRange: fits the data before the crash, marks what lies beyond', async () => {
  const {storyRange, clippedPoints, crashStepOf} = await import('../src/model.js');
  const steps = Array.from({length: 200}, (_, i) => i);
  const values = steps.map((s) => (s < 150 ? 1 + 0.1 * Math.sin(s) : 10 ** ((s - 150) / 2)));
  const series = [{steps, values}];
  assert.equal(crashStepOf({incidents: [{crash_step: null}, {crash_step: 160}, {crash_step: 150}]}), 150);
  assert.equal(crashStepOf({}), null);
  const r = storyRange(series, 150, [100], true);
  assert.ok(r && r.max >= 100 && r.max < 1e3 && r.min < 0.9 && r.min > 0.5, JSON.stringify(r));
  const lin = storyRange(series, 150, [], false);
  assert.ok(lin.max > 1.1 && lin.max < 1.5 && lin.min >= 0.7 && lin.min < 0.95, JSON.stringify(lin));
  const {points, peak} = clippedPoints(series, r.min, r.max);
  assert.equal(peak.step, 199);
  assert.ok(points.length > 0 && points.every((p) => p.edge === 'top' && p.step >= 150));
  assert.equal(storyRange(series, null, [], true), null); // no crash: the full range
  assert.equal(storyRange([{steps, values: steps.map(() => 1)}], 150, [], false), null); // nothing cut
  const ramp = steps.map((s) => s / 100);
  assert.equal(storyRange([{steps, values: ramp}], 150, [], false), null); // a ramp a little past the crash: not worth it
});

test('lossKindNote: the losses of a GAN or a reinforcement learner say what is watched; an objective says nothing', () => {
  assert.match(lossKindNote({loss_kind: 'adversarial'}), /GAN.*NaN\/Inf/);
  assert.match(lossKindNote({loss_kind: 'reinforcement'}), /reward or a return.*NaN\/Inf/);
  for (const a of [{loss_kind: 'objective'}, {}, null, {loss_kind: '__proto__'}, {loss_kind: 'toString'}]) {
    assert.equal(lossKindNote(a), null);
  }
});

test('lateStartNote: only a log that begins past its start says so', () => {
  assert.match(lateStartNote({late_start: true}), /resumed.*not judged/);
  for (const a of [{late_start: false}, {}, null, {late_start: 'true'}]) assert.equal(lateStartNote(a), null);
});

test('perplexityNote: only losses read from perplexities say so, naming the tags', () => {
  const note = perplexityNote({signals: {train_loss: {run: 'lm', tag: 'train/ppl', log: true},
    val_loss: {run: 'lm', tag: 'val/ppl', log: true}, lr: {run: 'lm', tag: 'lr'}}});
  assert.match(note, /natural log of the perplexities train\/ppl, val\/ppl/);
  for (const a of [{signals: {train_loss: {run: 'lm', tag: 'loss'}}}, {signals: {train_loss: {tag: 'p', log: 'true'}}},
    {signals: {train_loss: null}}, {}, null]) assert.equal(perplexityNote(a), null);
});

test('valByWallTimeNote: only a validation loss numbered by epoch says so', () => {
  assert.match(valByWallTimeNote({val_by_wall_time: true}), /epoch.*wall time/);
  for (const a of [{val_by_wall_time: false}, {}, null, {val_by_wall_time: 'true'}]) assert.equal(valByWallTimeNote(a), null);
});

test('a growth the run came back from: drawn over its window only, projecting nothing', () => {
  const fit = {start_step: 26, end_step: 68, start_value: 5, growth_per_step: 0.05, projected_step: 95,
    severity: 'warning'};
  assert.equal(cameBack(fit), true);
  assert.equal(projectsAhead(fit), false);
  const {steps} = fitLine(fit, 8);
  assert.equal(steps[steps.length - 1], 68);
  // a critical one (or one from a report before `severity`) still reaches its crossing
  for (const f of [{...fit, severity: 'critical'}, {...fit, severity: undefined}]) {
    assert.equal(cameBack(f), false);
    assert.equal(projectsAhead(f), true);
    assert.equal(fitLine(f, 8).steps.at(-1), 95);
  }
});
