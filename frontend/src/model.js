// Data shaping for the Crash Signals tab. Pure: no DOM, no uPlot, no fetch.
// Everything here is unit-tested with `node --test` (frontend/test/).

import {toNum, fmtStep, plural} from './format.js';

export const SIGNALS = ['train_loss', 'val_loss', 'grad_norm', 'update_ratio', 'lr'];

/** Sick runs first, then runs whose analysis is pending (big logdirs), then the healthy ones. */
export const HEALTH_RANK = {critical: 0, warning: 1, pending: 2, ok: 3, no_signals: 4};

export const HEALTH_LABEL = {
  critical: 'critical',
  warning: 'warning',
  pending: 'analysing…',
  ok: 'ok',
  no_signals: 'no signals',
};

/** Shape and colour both encode severity, so markers survive greyscale and colour-blindness. */
export const SEVERITY = {
  critical: {glyph: '◆', label: 'critical', color: '#d32f2f'},
  warning: {glyph: '▲', label: 'warning', color: '#e69500'},
};

export function severityOf(sev) {
  return SEVERITY[sev] || SEVERITY.warning;
}

export const SIGNAL_LABEL = {
  train_loss: 'train loss',
  val_loss: 'val loss',
  grad_norm: 'grad norm',
  update_ratio: 'update ratio',
  lr: 'learning rate',
};

/** The four charts of a run, in display order. `log`: default y distribution. */
export const CHARTS = [
  {id: 'loss', title: 'loss', signals: ['train_loss', 'val_loss'], log: false},
  {id: 'grad_norm', title: 'grad norm', signals: ['grad_norm'], log: true},
  {id: 'lr', title: 'learning rate', signals: ['lr'], log: false},
  {id: 'update_ratio', title: 'update ratio', signals: ['update_ratio'], log: true},
];

// ---------------------------------------------------------------------------------------------
// Run list

/** Stable sort: critical, warning, pending, ok, no_signals; the server's order is kept within a health. */
export function rankRuns(runs) {
  const rank = (r) => (r.health in HEALTH_RANK ? HEALTH_RANK[r.health] : 5);
  return runs
    .map((r, i) => [r, i])
    .sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1])
    .map(([r]) => r);
}

/**
 * Filters runs by a case-insensitive regex on the run name, like TensorBoard's run filter.
 * An invalid pattern filters nothing and returns its error message instead of throwing.
 */
export function filterRuns(runs, pattern) {
  if (!pattern) return {runs, error: null};
  let re;
  try {
    re = new RegExp(pattern, 'i');
  } catch (e) {
    const why = String(e.message).replace(/^Invalid regular expression: \/.*\/[a-z]*: /s, '');
    return {runs, error: `invalid regex: ${why}`};
  }
  return {runs: runs.filter((r) => re.test(r.run)), error: null};
}

/** Keeps the current selection if it still exists, else the first sick run, else the first run. */
export function defaultSelection(runs, current) {
  if (current !== null && current !== undefined && runs.some((r) => r.run === current)) {
    return current;
  }
  const sick = runs.find((r) => r.health === 'critical' || r.health === 'warning');
  if (sick) return sick.run;
  return runs.length ? runs[0].run : null;
}

/**
 * Whether a run's analysis is not finished: `health: "pending"` (not analysed yet), or
 * `pending: true` on a sick run whose newest data are still being analysed.
 */
export function isPending(entry) {
  return Boolean(entry) && (entry.pending === true || entry.health === 'pending');
}

/** {analysed, pending, total} of a `runs` payload: its `progress`, else counted from its runs. */
export function progressOf(payload) {
  const runs = payload && Array.isArray(payload.runs) ? payload.runs : [];
  const p = payload && payload.progress;
  const ok = (v) => Number.isInteger(v) && v >= 0;
  if (p && ok(p.analysed) && ok(p.pending) && ok(p.total)) {
    return {analysed: p.analysed, pending: p.pending, total: p.total};
  }
  const pending = runs.filter(isPending).length;
  return {analysed: runs.length - pending, pending, total: runs.length};
}

/**
 * The run to show. A run the user picked stays selected while it exists. A run picked
 * automatically (`auto`) gives way to the first sick run once one is known (runs are analysed
 * while the tab polls); otherwise the choice is defaultSelection's.
 */
export function pickSelection(runs, current, auto) {
  const exists = current !== null && current !== undefined && runs.some((r) => r.run === current);
  if (exists && auto) {
    const cur = runs.find((r) => r.run === current);
    const sick = runs.find((r) => r.health === 'critical' || r.health === 'warning');
    if (sick && cur.health !== 'critical' && cur.health !== 'warning') return sick.run;
    return current;
  }
  return defaultSelection(runs, current);
}

/** One status line while runs are analysed in the background, or null when none is pending. */
export function progressText(progress) {
  if (!progress || !progress.pending) return null;
  return `Analysing at full resolution: ${progress.analysed} of ${plural(progress.total, 'run')} done`;
}

/** {warning, critical} counts of a run entry, from `counts` or from its episodes. */
export function countsOf(entry) {
  if (entry.counts) {
    return {warning: entry.counts.warning || 0, critical: entry.counts.critical || 0};
  }
  const c = {warning: 0, critical: 0};
  for (const ep of entry.episodes || []) {
    if (ep.severity === 'critical') c.critical += 1;
    else if (ep.severity === 'warning') c.warning += 1;
  }
  return c;
}

/** Incidents per severity (the stories), or null when the entry predates incidents. */
export function incidentCountsOf(entry) {
  if (entry.incident_counts) {
    return {warning: entry.incident_counts.warning || 0, critical: entry.incident_counts.critical || 0};
  }
  if (!Array.isArray(entry.incidents)) return null;
  const c = {warning: 0, critical: 0};
  for (const inc of entry.incidents) {
    if (inc.severity === 'critical') c.critical += 1;
    else if (inc.severity === 'warning') c.warning += 1;
  }
  return c;
}

// What the analysis watches of losses that are not an objective (the report's `loss_kind`).
const LOSS_KIND_NOTE = {
  adversarial: 'A GAN’s losses (its tags name a generator and a discriminator): they do not fall like an objective, so they are watched for NaN/Inf, blow-ups, gradient norms and learning rates only.',
  reinforcement: 'A reinforcement learner’s losses (the run logs a reward or a return): they move with the returns it learns, so they are watched for NaN/Inf, blow-ups, gradient norms and learning rates only.',
};

/** The note a run's losses get when they are not an objective; null for an objective's (or an older server's). */
export function lossKindNote(analysis) {
  return (analysis && Object.hasOwn(LOSS_KIND_NOTE, analysis.loss_kind) && LOSS_KIND_NOTE[analysis.loss_kind]) || null;
}

/** The note a run gets when its log begins past its start (a resumed job); null otherwise. */
export function lateStartNote(analysis) {
  if (!analysis || analysis.late_start !== true) return null;
  return 'This log begins past its run’s start (a job resumed from a checkpoint into a new log directory): its first points are not the untrained model’s, so what the run learnt or lost since its start, and whether it is still near it, are not judged.';
}

/** The note a run gets when its validation loss was numbered by epoch and is drawn at the train loss's steps; null otherwise. */
export function valByWallTimeNote(analysis) {
  if (!analysis || analysis.val_by_wall_time !== true) return null;
  return 'The validation loss was logged with the epoch as its step while the train loss counts steps: each validation point is read and drawn at the last train step logged before it was written (by wall time). TensorBoard’s own charts show it at the epoch numbers; log it with the global step to line them up there too.';
}

/** The note a run gets when its losses are read from perplexities (no loss logged); null otherwise. */
export function perplexityNote(analysis) {
  const refs = Object.values((analysis && analysis.signals) || {}).filter(
    (ref) => ref && ref.log === true && typeof ref.tag === 'string');
  if (!refs.length) return null;
  const tags = refs.map((ref) => ref.tag).join(', ');
  return `No loss is logged: the losses drawn and analysed are the natural log of the perplexities ${tags} (the cross-entropy they exponentiate). TensorBoard’s own charts show the perplexities.`;
}

/** One sentence: what happened, when, and how early. The server's headline wins. */
export function headlineOf(entry) {
  const h = entry.headline || (entry.summary && entry.summary.headline);
  if (h) return h;
  if (entry.health === 'no_signals') {
    return 'no loss, gradient-norm, learning-rate or update-ratio tags recognised';
  }
  if (entry.health === 'ok') return 'no crash signals';
  if (entry.health === 'pending') return 'analysing: not analysed yet';
  const c = countsOf(entry);
  const first = entry.first_critical_step ?? entry.summary?.first_critical_step ?? null;
  const parts = [];
  if (c.critical) parts.push(plural(c.critical, 'critical finding'));
  if (c.warning) parts.push(plural(c.warning, 'warning'));
  let s = parts.join(', ') || entry.health;
  if (first !== null && first !== undefined) s += `; first critical at step ${fmtStep(first)}`;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Series

/**
 * TensorBoard's debiased exponential moving average. Non-finite points (null) stay null and are
 * skipped, so they neither reset nor poison the average.
 */
export function smoothEMA(values, weight) {
  const w = Math.min(Math.max(Number(weight) || 0, 0), 0.999);
  const out = new Array(values.length);
  if (w === 0) {
    for (let i = 0; i < values.length; i++) out[i] = toNum(values[i]);
    return out;
  }
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = toNum(values[i]);
    if (v === null) {
      out[i] = null;
      continue;
    }
    last = last * w + (1 - w) * v;
    n += 1;
    out[i] = last / (1 - Math.pow(w, n));
  }
  return out;
}

/** Whether a log scale can show these values (every finite value > 0, at least one value). */
export function canLog(valueLists) {
  let any = false;
  for (const vals of valueLists) {
    for (const v of vals) {
      const x = toNum(v);
      if (x === null) continue;
      if (x <= 0) return false;
      any = true;
    }
  }
  return any;
}

/** Whether positive values span more than `decades` orders of magnitude (a blow-up): log y by default. */
export function wideRange(valueLists, decades = 3) {
  let lo = Infinity;
  let hi = 0;
  for (const vals of valueLists) {
    for (const v of vals) {
      const x = toNum(v);
      if (x === null || x <= 0) continue;
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
  }
  return hi > 0 && hi / lo > 10 ** decades;
}

/** Sorted union of several step arrays (numbers only). */
export function unionSteps(...lists) {
  const set = new Set();
  for (const l of lists) for (const s of l || []) if (toNum(s) !== null) set.add(s);
  return Float64Array.from(set).sort();
}

/** Places values keyed by their own steps onto a shared x array; missing points are null. */
export function alignTo(xs, steps, values) {
  const idx = new Map();
  for (let i = 0; i < xs.length; i++) idx.set(xs[i], i);
  const out = new Array(xs.length).fill(null);
  for (let i = 0; i < steps.length; i++) {
    const j = idx.get(steps[i]);
    if (j !== undefined) out[j] = toNum(values[i]);
  }
  return out;
}

/** The charts this run can draw (those with at least one non-empty series). */
export function presentCharts(analysis) {
  const series = analysis.series || {};
  const has = (s) => series[s] && series[s].steps && series[s].steps.length > 0;
  return CHARTS.filter((c) => c.signals.some(has));
}

/** The chart an episode or fit of `signal` is drawn on; falls back to the first chart. */
export function chartIdFor(signal, charts) {
  const own = charts.find((c) => c.signals.includes(signal));
  if (own) return own.id;
  return charts.length ? charts[0].id : null;
}

/** [min, max] step over everything the run draws, so all charts share one x range. */
export function stepExtent(analysis) {
  let lo = Infinity;
  let hi = -Infinity;
  const see = (s) => {
    const x = toNum(s);
    if (x === null) return;
    if (x < lo) lo = x;
    if (x > hi) hi = x;
  };
  for (const ser of Object.values(analysis.series || {})) {
    const st = ser.steps || [];
    if (st.length) {
      see(st[0]);
      see(st[st.length - 1]);
    }
  }
  for (const ep of analysis.episodes || []) {
    see(ep.start_step);
    see(ep.end_step);
  }
  for (const f of shownFits(analysis.fits, analysis.incidents)) {
    see(f.start_step);
    see(cameBack(f) ? f.end_step : f.projected_step);
  }
  for (const list of Object.values(analysis.nonfinite || {})) for (const p of list) see(p.step);
  if (lo === Infinity) return {min: 0, max: 1};
  if (lo === hi) return {min: lo - 1, max: hi + 1};
  return {min: lo, max: hi};
}

/**
 * uPlot data for one chart: `[xs, raw1, smooth1, raw2, smooth2, (gapVal, gapTrain)]`.
 * Raw columns keep every point (drawn faint), smoothed ones are drawn on top. In log mode values
 * <= 0 become gaps. `cols` says what each column is, so chart code can style it.
 */
export function chartData(analysis, chart, {smoothing = 0, log = false, extent = null} = {}) {
  const series = analysis.series || {};
  const present = chart.signals.filter((s) => series[s] && series[s].steps && series[s].steps.length);
  const gap = chart.id === 'loss' && analysis.gap_band && analysis.gap_band.steps ? analysis.gap_band : null;
  const stepLists = present.map((s) => series[s].steps);
  if (gap) stepLists.push(gap.steps);
  if (extent) stepLists.push([extent.min, extent.max]);
  const xs = unionSteps(...stepLists);
  const clean = (arr) => (log ? arr.map((v) => (v !== null && v > 0 ? v : null)) : arr);
  const data = [xs];
  const cols = [{role: 'x'}];
  for (const s of present) {
    const {steps, values} = series[s];
    data.push(clean(alignTo(xs, steps, values)));
    cols.push({role: 'raw', signal: s});
    data.push(clean(alignTo(xs, steps, smoothEMA(values, smoothing))));
    cols.push({role: 'smooth', signal: s});
  }
  let band = null;
  if (gap) {
    data.push(clean(alignTo(xs, gap.steps, gap.val)));
    cols.push({role: 'gap_val', signal: 'val_loss'});
    data.push(clean(alignTo(xs, gap.steps, gap.train)));
    cols.push({role: 'gap_train', signal: 'train_loss'});
    band = [data.length - 2, data.length - 1];
  }
  return {data, cols, band};
}

// ---------------------------------------------------------------------------------------------
// Overlays geometry

/**
 * Points of a growth fit, value(s) = start_value * exp(growth_per_step * (s - start_step)), from
 * its start to the projected threshold crossing (or its end if it projects none).
 */
export function fitLine(fit, n = 48) {
  const s0 = toNum(fit.start_step);
  const v0 = toNum(fit.start_value);
  const g = toNum(fit.growth_per_step);
  if (s0 === null || v0 === null || g === null) return {steps: [], values: []};
  let s1 = cameBack(fit) ? null : toNum(fit.projected_step);
  const end = toNum(fit.end_step);
  if (s1 === null || (end !== null && s1 < end)) s1 = end ?? s0;
  const steps = [];
  const values = [];
  const k = Math.max(2, n);
  for (let i = 0; i < k; i++) {
    const s = s0 + ((s1 - s0) * i) / (k - 1);
    steps.push(s);
    values.push(v0 * Math.exp(g * (s - s0)));
  }
  return {steps, values};
}

/**
 * The fits a chart draws: every prediction (each episode's first alarm and its latest refresh),
 * but none made after the crash of the incident it belongs to: once the run has crashed, a fit
 * re-opened on its wreckage projects nothing.
 */
export function shownFits(fits, incidents = []) {
  const crashes = [];
  for (const inc of incidents || []) {
    const crash = toNum(inc?.crash_step);
    const lo = toNum(inc?.start_step);
    if (crash === null || lo === null) continue;
    crashes.push({lo, hi: inc.open ? Infinity : toNum(inc.end_step) ?? Infinity, crash});
  }
  return (fits || []).filter((f) => {
    if (!f) return false;
    const s = toNum(f.start_step);
    return s === null || !crashes.some((c) => s > c.crash && s >= c.lo && s <= c.hi);
  });
}

/** Whether a fit's episode is a growth the run came back from (a warning): no crossing to expect. */
export function cameBack(fit) {
  return fit?.severity === 'warning';
}

/** Whether a fit still projects its crossing ahead of the step it was made at. */
export function projectsAhead(fit) {
  if (cameBack(fit)) return false;
  const p = toNum(fit.projected_step);
  const e = toNum(fit.end_step);
  return p !== null && e !== null && Math.round(p - e) > 0;
}

/** "explodes in ~35 steps" (counted from the step the fit was made), or what is known instead. */
export function fitLabel(fit) {
  const p = toNum(fit.projected_step);
  const e = toNum(fit.end_step);
  if (p !== null && e !== null) {
    const n = Math.round(p - e);
    if (n > 0) return `explodes in ~${n} step${n === 1 ? '' : 's'}`;
    return 'at the threshold';
  }
  const d = toNum(fit.doubling_steps);
  return d !== null ? `doubling every ~${Math.round(d)} steps` : 'growth fit';
}

/**
 * Horizontal placement of an episode, in CSS pixels of the plot area. A run of steps wider than
 * `minSpan` pixels is a span; a single step (or a zoomed-out short run) is a tick.
 */
export function episodeBox(x0, x1, plotWidth, minSpan = 4) {
  if (!(x1 >= x0)) [x0, x1] = [x1, x0];
  if (!Number.isFinite(x0) || !Number.isFinite(x1)) return {visible: false, kind: 'tick', left: 0, width: 0};
  if (x1 < -0.5 || x0 > plotWidth + 0.5) return {visible: false, kind: 'tick', left: 0, width: 0};
  const left = Math.max(0, x0);
  const right = Math.min(plotWidth, x1);
  if (x1 - x0 >= minSpan) return {visible: true, kind: 'span', left, width: Math.max(right - left, 1)};
  return {visible: true, kind: 'tick', left: Math.min(Math.max(x0, 0), plotWidth), width: 0};
}

const NONFINITE_LABEL = {NaN: 'NaN', Infinity: '+Inf', '-Infinity': '-Inf', null: 'NaN'};

/** Non-finite points as edge markers: -Infinity at the bottom edge, NaN and +Infinity at the top. */
export function nonfiniteMarks(list) {
  return (list || [])
    .filter((p) => toNum(p.step) !== null)
    .map((p) => ({
      step: p.step,
      value: NONFINITE_LABEL[String(p.value)] || 'NaN',
      edge: String(p.value).startsWith('-') ? 'bottom' : 'top',
    }));
}

/** x range that shows an episode with some context; never beyond the run's extent. */
export function zoomRange(ep, extent) {
  const s = toNum(ep.start_step);
  const e = toNum(ep.end_step) ?? s;
  const total = extent.max - extent.min;
  const width = Math.max(e - s, 0);
  const margin = Math.max(width * 0.5, total * 0.02, 5);
  let min = Math.max(extent.min, s - margin);
  let max = Math.min(extent.max, e + margin);
  if (max <= min) {
    min = s - 5;
    max = s + 5;
  }
  return {min, max};
}

/** Tooltip text of an episode: rule, severity, step span, peak, message, advice. */
export function episodeTitle(ep) {
  const lines = [`${ep.code} ${ep.rule} (${ep.severity})`];
  const span =
    ep.end_step !== null && ep.end_step !== undefined && ep.end_step !== ep.start_step
      ? `steps ${fmtStep(ep.start_step)}–${ep.open ? '…' : fmtStep(ep.end_step)}`
      : `step ${fmtStep(ep.start_step)}`;
  let peak = '';
  if (ep.peak_step !== null && ep.peak_step !== undefined) {
    const pv = ep.peak_value === null || ep.peak_value === undefined ? 'non-finite' : String(+Number(ep.peak_value).toPrecision(4));
    peak = ` · peak ${pv} at ${fmtStep(ep.peak_step)}`;
  }
  lines.push(span + peak);
  if (ep.message) lines.push(ep.message);
  if (ep.advice) lines.push(`→ ${ep.advice}`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Unrecognised tags

/** A TOML basic string (JSON string escapes are valid TOML basic-string escapes). */
export function tomlString(s) {
  return JSON.stringify(String(s));
}

/** A `crash_signals.toml` snippet mapping a run's tags, guessing from names where it can. */
export function tomlSnippet(tagsByRun) {
  const tags = [];
  for (const list of Object.values(tagsByRun || {})) for (const t of list) if (!tags.includes(t)) tags.push(t);
  const guess = (re) => tags.find((t) => re.test(t));
  const lines = ['[signals]'];
  const train = guess(/loss|nll|objective/i);
  lines.push(`train_loss = ${tomlString(train || 'your/loss/tag')}`);
  const rest = [
    ['val_loss', /val|eval|valid/i],
    ['grad_norm', /grad|gnorm/i],
    ['lr', /(^|[^a-z])lr|learning.?rate/i],
    ['update_ratio', /update/i],
  ];
  for (const [sig, re] of rest) {
    const t = guess(re);
    if (t && t !== train) lines.push(`${sig} = ${tomlString(t)}`);
    else lines.push(`# ${sig} = "your/${sig.replace('_', '/')}/tag"`);
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Story-first y range

/** The first step at which a crash incident says the run diverged (null: no crash). */
export function crashStepOf(analysis) {
  let first = null;
  for (const inc of (analysis && analysis.incidents) || []) {
    const s = toNum(inc.crash_step);
    if (s !== null && (first === null || s < first)) first = s;
  }
  return first;
}

function quantile(sorted, q) {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))));
  return sorted[i];
}

/**
 * The y range a crashed run's chart opens with: the values logged before `crashStep` (their 0.5 %
 * and 99.5 % quantiles, so one early outlier cannot stretch it), widened to `extras` (threshold,
 * healthy band, the growth-fit line up to its crossing) plus headroom. `series`: [{steps, values}].
 * Returns {min, max, clipped} or null when nothing needs it (no crash, too few points before it, or
 * the full range is not much wider).
 */
export function storyRange(series, crashStep, extras = [], log = false) {
  if (crashStep === null || crashStep === undefined) return null;
  const before = [];
  let lo = Infinity;
  let hi = -Infinity;
  for (const {steps, values} of series) {
    for (let i = 0; i < steps.length; i++) {
      const v = toNum(values[i]);
      if (v === null || (log && v <= 0)) continue;
      if (steps[i] < crashStep) before.push(v);
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (before.length < 5) return null;
  before.sort((a, b) => a - b);
  let min = quantile(before, 0.005);
  let max = quantile(before, 0.995);
  for (const v of extras) {
    const x = toNum(v);
    if (x === null || (log && x <= 0)) continue;
    min = Math.min(min, x);
    max = Math.max(max, x);
  }
  if (log) {
    const decades = Math.max(Math.log10(max / min), 0.3);
    max *= 10 ** (0.12 * decades);
    min /= 10 ** (0.05 * decades);
  } else {
    const span = max - min || Math.abs(max) || 1;
    const floor = min >= 0 ? 0 : -Infinity;
    max += 0.12 * span;
    min = Math.max(min - 0.05 * span, floor);
  }
  // Worth it only when the full range would squash the story: beyond 3x its span (log: a decade).
  const squashed = log ? hi / max > 10 || min / lo > 10 : hi - lo > 3 * (max - min);
  if (!squashed) return null;
  return {min, max, clipped: true};
}

/** Points of `series` outside [min, max]: {step, value, edge} (edge 'top' or 'bottom'), and the peak. */
export function clippedPoints(series, min, max) {
  const out = [];
  let peak = null;
  for (const {steps, values} of series) {
    for (let i = 0; i < steps.length; i++) {
      const v = toNum(values[i]);
      if (v === null) continue;
      if (v > max) {
        out.push({step: steps[i], value: v, edge: 'top'});
        if (peak === null || v > peak.value) peak = {step: steps[i], value: v};
      } else if (v < min) out.push({step: steps[i], value: v, edge: 'bottom'});
    }
  }
  out.sort((a, b) => a.step - b.step);
  return {points: out, peak};
}
