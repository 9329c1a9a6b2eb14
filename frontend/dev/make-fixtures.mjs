// Writes the dev server's fixture payloads (dev/fixtures/<set>/{runs,rules,analysis}.json) in the
// plugin's route schema. Seeded, so the output is stable: `node dev/make-fixtures.mjs`.
import fs from 'node:fs';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, 'fixtures');

let seed = 20261130;
function rand() {
  // mulberry32
  seed |= 0;
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
function randn() {
  const u = Math.max(rand(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand());
}
const round = (v, d = 5) => (v === null ? null : Number(v.toPrecision(d)));
const range = (a, b, step = 1) => Array.from({length: Math.floor((b - a) / step) + 1}, (_, i) => a + i * step);

/** Bucket min/max decimation to <= maxPoints (as the backend does), nulls kept. */
function decimate(steps, values, maxPoints = 2000) {
  if (steps.length <= maxPoints) return {steps, values};
  const size = Math.ceil(steps.length / (maxPoints / 2));
  const s = [];
  const v = [];
  for (let i = 0; i < steps.length; i += size) {
    let lo = -1;
    let hi = -1;
    let nul = -1;
    for (let j = i; j < Math.min(i + size, steps.length); j++) {
      if (values[j] === null) {
        if (nul < 0) nul = j;
        continue;
      }
      if (lo < 0 || values[j] < values[lo]) lo = j;
      if (hi < 0 || values[j] > values[hi]) hi = j;
    }
    const keep = [...new Set([lo, hi, nul].filter((k) => k >= 0))].sort((a, b) => a - b);
    for (const k of keep) {
      s.push(steps[k]);
      v.push(values[k]);
    }
  }
  return {steps: s, values: v};
}

function series(steps, fn, d = 5) {
  const values = steps.map((s) => {
    const x = fn(s);
    return Number.isFinite(x) ? round(x, d) : null;
  });
  return {steps, values};
}

function nonfiniteOf(ser, raw) {
  const out = [];
  ser.steps.forEach((s) => {
    const x = raw(s);
    if (!Number.isFinite(x)) out.push({step: s, value: Number.isNaN(x) ? 'NaN' : x > 0 ? 'Infinity' : '-Infinity'});
  });
  return out;
}

function finish(entry, full) {
  // full: {signal: {steps, values}} at full resolution; decimate into entry.series.
  entry.series = {};
  entry.points = {};
  for (const [sig, ser] of Object.entries(full)) {
    entry.points[sig] = ser.steps.length;
    entry.series[sig] = decimate(ser.steps, ser.values);
  }
  entry.counts = {
    warning: entry.episodes.filter((e) => e.severity === 'warning').length,
    critical: entry.episodes.filter((e) => e.severity === 'critical').length,
  };
  return entry;
}

function gapBand(train, val) {
  const tmap = new Map(train.steps.map((s, i) => [s, train.values[i]]));
  const steps = [];
  const t = [];
  const v = [];
  val.steps.forEach((s, i) => {
    // mean train loss over the 50 steps before the evaluation
    let sum = 0;
    let n = 0;
    for (let k = s - 49; k <= s; k++) {
      const x = tmap.get(k);
      if (x !== undefined && x !== null) {
        sum += x;
        n += 1;
      }
    }
    if (!n || val.values[i] === null) return;
    steps.push(s);
    t.push(round(sum / n));
    v.push(val.values[i]);
  });
  return {steps, train: t, val: v};
}

const sig = (run, tag) => ({run, tag});

// ---- 1. critical: grad-norm growth, explosion, NaN ----------------------------------------------
function runCritical() {
  const name = 'exp3/lr=3e-3';
  const last = 4200;
  const steps = range(1, last);
  const gRaw = (s) => {
    if (s >= 4190) return NaN;
    const base = 1.5 * Math.exp(0.12 * randn());
    return s < 4060 ? base : base * Math.exp(0.04 * (s - 4060));
  };
  const gvals = steps.map(gRaw);
  const gn = {steps, values: gvals.map((x) => (Number.isFinite(x) ? round(x) : null))};
  const lRaw = (s) => {
    if (s >= 4190) return NaN;
    let l = 2.2 * Math.exp(-s / 700) + 0.42 + 0.035 * randn();
    if (s >= 2210 && s <= 2214) l *= [2.7, 2.4, 1.8, 1.3, 1.1][s - 2210];
    if (s > 4150) l += 0.02 * Math.exp(0.11 * (s - 4150));
    return l;
  };
  const lvals = steps.map(lRaw);
  const train = {steps, values: lvals.map((x) => (Number.isFinite(x) ? round(x) : null))};
  const nonfinite = {
    train_loss: steps.filter((s) => s >= 4190).map((s) => ({step: s, value: 'NaN'})),
    grad_norm: steps.filter((s) => s >= 4190).map((s) => ({step: s, value: s === 4190 ? 'Infinity' : 'NaN'})),
  };
  const val = series(range(250, 4000, 250), (s) => 2.2 * Math.exp(-s / 700) + 0.5 + 0.01 * randn());
  const lr = series(steps, (s) => (s <= 500 ? (3e-3 * s) / 500 : 3e-3 * 0.5 * (1 + Math.cos((Math.PI * (s - 500)) / 9500))));
  const ur = series(range(10, 4180, 10), (s) => {
    let r = 2.5e-3 * Math.exp(0.25 * randn()) * Math.min(1, s / 500 + 0.05);
    if (s > 4100) r *= Math.exp(0.045 * (s - 4100));
    return r;
  });
  const peakG = Math.max(...gn.values.filter((x) => x !== null && gn.steps[gn.values.indexOf(x)] <= 4188));
  const fit = {
    code: 'CS201', signal: 'grad_norm', start_step: 4070, end_step: 4120, start_value: round(1.5 * Math.exp(0.4), 4),
    growth_per_step: 0.04, doubling_steps: 17.3, r2: 0.94, projected_step: 4165, threshold: 100.0,
  };
  const episodes = [
    {code: 'CS105', rule: 'loss-spike', family: 'spike', severity: 'warning', signal: 'train_loss', start_step: 2210, end_step: 2214,
      peak_step: 2210, peak_value: round(lvals[2209]), open: false,
      message: 'train loss 2.7× its robust baseline; recovered in 4 steps (fast)', advice: 'inspect the batch at step 2210; harmless if isolated'},
    {code: 'CS201', rule: 'grad-norm-growth', family: 'growth', severity: 'critical', signal: 'grad_norm', start_step: 4120, end_step: 4165,
      peak_step: 4165, peak_value: round(gvals[4164]), open: false,
      message: 'grad norm doubling every 17 steps; crosses 100 in ~45 steps', advice: 'lower the learning rate or clip gradients'},
    {code: 'CS302', rule: 'update-ratio-high', family: 'optimizer', severity: 'warning', signal: 'update_ratio', start_step: 4150, end_step: 4180,
      peak_step: 4180, peak_value: round(ur.values[ur.values.length - 1]), open: false,
      message: 'update ratio above 0.1 for 4 measurements: weights change by more than 10% per step', advice: 'lower the learning rate'},
    {code: 'CS101', rule: 'grad-norm-threshold', family: 'explosion', severity: 'critical', signal: 'grad_norm', start_step: 4165, end_step: 4189,
      peak_step: 4189, peak_value: round(peakG), open: false,
      message: `grad norm ${round(peakG, 3)} > 100`, advice: 'clip gradients; restart from a checkpoint before step 4120'},
    {code: 'CS103', rule: 'loss-blowup', family: 'divergence', severity: 'critical', signal: 'train_loss', start_step: 4172, end_step: 4189,
      peak_step: 4189, peak_value: round(lvals[4188]), open: false,
      message: 'train loss above 2× its 128-step mean for 17 steps', advice: 'the run is diverging: stop it and lower the learning rate'},
    {code: 'CS001', rule: 'nonfinite', family: 'nonfinite', severity: 'critical', signal: 'train_loss', start_step: 4190, end_step: 4200,
      peak_step: 4190, peak_value: null, open: true,
      message: 'train loss and grad norm are NaN/Inf from step 4190 (11 steps)', advice: 'restart from a checkpoint before step 4120 with a lower learning rate'},
  ];
  const entry = {
    run: name, health: 'critical',
    first_critical_step: 4120,
    signals: {train_loss: sig(name, 'train/loss'), val_loss: sig(name, 'eval/loss'), grad_norm: sig(name, 'train/grad_norm'),
      update_ratio: sig(name, 'optim/update_ratio'), lr: sig(name, 'train/learning_rate')},
    sampled: false,
    headline: 'grad norm explodes at step 4165; predicted at step 4120 (45 steps early); NaN from step 4190',
    tags: {[name]: ['eval/loss', 'optim/update_ratio', 'train/grad_norm', 'train/learning_rate', 'train/loss']},
    episodes, fits: [fit],
    summary: {first_critical_step: 4120, first_warning_step: 2210, loss_trend: 'increasing', grad_norm_max: round(peakG),
      val_train_gap: 0.06, headline: null},
    nonfinite,
    gap_band: gapBand(train, val),
    bands: {update_ratio: [1e-5, 1e-1]},
    thresholds: {grad_norm: 100.0},
  };
  entry.summary.headline = entry.headline;
  return finish(entry, {train_loss: train, val_loss: val, grad_norm: gn, update_ratio: ur, lr});
}

// ---- 2. warning: spikes ----------------------------------------------------------------------------
function runSpikes() {
  const name = 'exp7/nowarmup';
  const steps = range(1, 3000);
  const spikes = {800: 3.6, 1500: 2.4, 1501: 2.2, 1502: 2.0, 1505: 1.8, 1510: 1.5, 1515: 1.3, 1520: 1.15, 2300: 2.9};
  const train = series(steps, (s) => (1.9 * Math.exp(-s / 900) + 0.6 + 0.03 * randn()) * (spikes[s] || 1));
  const gn = series(steps, (s) => 0.9 * Math.exp(0.15 * randn()) * (spikes[s] ? spikes[s] * 2.2 : 1));
  const val = series(range(200, 3000, 200), (s) => 1.9 * Math.exp(-s / 900) + 0.68 + 0.01 * randn());
  const lr = series(steps, () => 1e-3);
  const ur = series(range(10, 3000, 10), () => 1.2e-3 * Math.exp(0.2 * randn()));
  const v = (s) => train.values[s - 1];
  const episodes = [
    {code: 'CS104', rule: 'loss-jump', family: 'spike', severity: 'warning', signal: 'train_loss', start_step: 800, end_step: 800, peak_step: 800,
      peak_value: v(800), open: false, message: 'train loss jumped 3.6× over the previous step', advice: 'inspect the batch at step 800'},
    {code: 'CS106', rule: 'grad-norm-spike', family: 'spike', severity: 'warning', signal: 'grad_norm', start_step: 800, end_step: 800, peak_step: 800,
      peak_value: gn.values[799], open: false, message: 'grad norm 8× its robust baseline (|z| = 14)', advice: 'clip gradients; add learning-rate warm-up'},
    {code: 'CS105', rule: 'loss-spike', family: 'spike', severity: 'warning', signal: 'train_loss', start_step: 1500, end_step: 1520, peak_step: 1500,
      peak_value: v(1500), open: false, message: 'train loss 2.4× its robust baseline; recovered in 20 steps (slow)', advice: 'add learning-rate warm-up or lower the peak learning rate'},
    {code: 'CS106', rule: 'grad-norm-spike', family: 'spike', severity: 'warning', signal: 'grad_norm', start_step: 1500, end_step: 1502, peak_step: 1500,
      peak_value: gn.values[1499], open: false, message: 'grad norm 5× its robust baseline (|z| = 9)', advice: 'clip gradients'},
    {code: 'CS104', rule: 'loss-jump', family: 'spike', severity: 'warning', signal: 'train_loss', start_step: 2300, end_step: 2300, peak_step: 2300,
      peak_value: v(2300), open: false, message: 'train loss jumped 2.9× over the previous step', advice: 'inspect the batch at step 2300'},
  ];
  const entry = {
    run: name, health: 'warning', first_critical_step: null,
    signals: {train_loss: sig(name, 'Loss/train'), val_loss: sig(name, 'Loss/val'), grad_norm: sig(name, 'grad_norm'), update_ratio: sig(name, 'update_ratio'), lr: sig(name, 'lr-Adam')},
    sampled: false,
    headline: '3 loss spikes (steps 800, 1500, 2300), all recovered; no crash predicted',
    tags: {[name]: ['Loss/train', 'Loss/val', 'grad_norm', 'lr-Adam', 'update_ratio']},
    episodes, fits: [],
    summary: {first_critical_step: null, first_warning_step: 800, loss_trend: 'decreasing', grad_norm_max: Math.max(...gn.values), val_train_gap: 0.07, headline: null},
    nonfinite: {}, gap_band: gapBand(train, val), bands: {update_ratio: [1e-5, 1e-1]}, thresholds: {grad_norm: 100.0},
  };
  entry.summary.headline = entry.headline;
  return finish(entry, {train_loss: train, val_loss: val, grad_norm: gn, update_ratio: ur, lr});
}

// ---- 3. ok ----------------------------------------------------------------------------------------
function runOk(sampled = false) {
  const name = 'exp1/baseline';
  const steps = range(1, 5000);
  const train = series(steps, (s) => 2.0 * Math.exp(-s / 1200) + 0.3 + 0.03 * randn());
  const val = series(range(250, 5000, 250), (s) => 2.0 * Math.exp(-s / 1200) + 0.34 + 0.008 * randn());
  const gn = series(steps, (s) => 1.1 * Math.exp(-s / 4000) * Math.exp(0.12 * randn()) + 0.2);
  const lr = series(steps, (s) => (s <= 300 ? (1e-3 * s) / 300 : 1e-3 * 0.5 * (1 + Math.cos((Math.PI * (s - 300)) / 4700))));
  const ur = series(range(10, 5000, 10), (s) => 8e-4 * Math.exp(0.2 * randn()) * Math.max(0.05, lr.values[s - 1] / 1e-3));
  const entry = {
    run: name, health: 'ok', first_critical_step: null,
    signals: {train_loss: sig(name, 'train/loss'), val_loss: sig(name, 'eval/loss'), grad_norm: sig(name, 'train/grad_norm'), update_ratio: sig(name, 'optim/update_ratio'), lr: sig(name, 'train/learning_rate')},
    sampled,
    headline: 'healthy: loss decreasing, grad norm ≤ 1.6, no findings',
    tags: {[name]: ['eval/loss', 'optim/update_ratio', 'train/grad_norm', 'train/learning_rate', 'train/loss']},
    episodes: [], fits: [],
    summary: {first_critical_step: null, first_warning_step: null, loss_trend: 'decreasing', grad_norm_max: 1.6, val_train_gap: 0.04, headline: null},
    nonfinite: {}, gap_band: gapBand(train, val), bands: {update_ratio: [1e-5, 1e-1]}, thresholds: {grad_norm: 100.0},
  };
  entry.summary.headline = entry.headline;
  return finish(entry, {train_loss: train, val_loss: val, grad_norm: gn, update_ratio: ur, lr});
}

// ---- 4. warning, hostile name: overfitting --------------------------------------------------------
function runHostile() {
  const name = '<img src=x onerror=alert(1)>';
  const steps = range(1, 3000);
  const train = series(steps, (s) => 1.5 * Math.exp(-s / 500) + 0.04 + 0.01 * randn());
  const val = series(range(100, 3000, 100), (s) => (s < 1200 ? 1.5 * Math.exp(-s / 500) + 0.55 : 0.685 + 0.00032 * (s - 1200)) + 0.01 * randn());
  const episodes = [
    {code: 'CS402', rule: 'val-train-divergence', family: 'overfit', severity: 'warning', signal: 'val_loss', start_step: 1600, end_step: 3000, peak_step: 3000,
      peak_value: val.values[val.values.length - 1], open: true, message: 'validation loss rising for 5 evaluations while train loss falls', advice: 'stop at the best checkpoint (step 1200) or add regularisation'},
    {code: 'CS401', rule: 'overfitting', family: 'overfit', severity: 'warning', signal: 'val_loss', start_step: 2100, end_step: 3000, peak_step: 3000,
      peak_value: val.values[val.values.length - 1], open: true, message: 'train loss 0.05 < 0.1 and val loss 1.27 > 5 × train loss', advice: 'more data, augmentation, weight decay or early stopping'},
  ];
  const entry = {
    run: name, health: 'warning', first_critical_step: null,
    signals: {train_loss: sig(name, 'train_loss'), val_loss: sig(name, 'val_loss'), grad_norm: null, update_ratio: null, lr: null},
    sampled: false,
    headline: 'overfitting since step 1600: validation loss up 80% from its best at step 1200',
    tags: {[name]: ['train_loss', 'val_loss']},
    episodes, fits: [],
    summary: {first_critical_step: null, first_warning_step: 1600, loss_trend: 'decreasing', grad_norm_max: null, val_train_gap: 1.22, headline: null},
    nonfinite: {}, gap_band: gapBand(train, val), bands: {}, thresholds: {},
  };
  entry.summary.headline = entry.headline;
  return finish(entry, {train_loss: train, val_loss: val});
}

// ---- 5. Keras sibling runs, ok ---------------------------------------------------------------------
function runKeras() {
  const name = 'mnist_keras';
  const ep = range(0, 19);
  const train = series(ep, (s) => 0.9 * Math.exp(-s / 3) + 0.05 + 0.005 * randn());
  const val = series(ep, (s) => 0.8 * Math.exp(-s / 3) + 0.09 + 0.006 * randn());
  const entry = {
    run: name, health: 'ok', first_critical_step: null,
    signals: {train_loss: sig(`${name}/train`, 'epoch_loss'), val_loss: sig(`${name}/validation`, 'epoch_loss'), grad_norm: null, update_ratio: null, lr: null},
    sampled: false, headline: 'healthy: loss decreasing over 20 epochs, no findings',
    tags: {[`${name}/train`]: ['epoch_loss', 'epoch_accuracy'], [`${name}/validation`]: ['epoch_loss', 'epoch_accuracy']},
    episodes: [], fits: [],
    summary: {first_critical_step: null, first_warning_step: null, loss_trend: 'decreasing', grad_norm_max: null, val_train_gap: 0.03, headline: null},
    nonfinite: {}, gap_band: {steps: val.steps, train: train.values, val: val.values}, bands: {}, thresholds: {},
  };
  entry.summary.headline = entry.headline;
  return finish(entry, {train_loss: train, val_loss: val});
}

// ---- 6. no signals ---------------------------------------------------------------------------------
function runNoSignals() {
  const name = 'hparams-only';
  return {
    run: name, health: 'no_signals', counts: {warning: 0, critical: 0}, first_critical_step: null,
    signals: {train_loss: null, val_loss: null, grad_norm: null, update_ratio: null, lr: null},
    points: {}, sampled: false, headline: 'no loss, gradient-norm, learning-rate or update-ratio tags recognised (3 tags)',
    tags: {[name]: ['metrics/top1', 'objective/nll_total', 'sys/gpu_mem_gb']},
    episodes: [], fits: [], summary: {first_critical_step: null, first_warning_step: null, loss_trend: null, grad_norm_max: null, val_train_gap: null, headline: null},
    series: {}, nonfinite: {}, gap_band: null, bands: {}, thresholds: {},
  };
}

const RULES = [
  ['CS001', 'nonfinite', 'nonfinite', 'critical', ['train_loss', 'val_loss', 'grad_norm', 'update_ratio', 'lr'], 'A monitored scalar is NaN or ±Inf.', {}],
  ['CS101', 'grad-norm-threshold', 'explosion', 'critical', ['grad_norm'], 'Gradient norm above an absolute threshold (the article’s first layer).', {threshold: 100.0}],
  ['CS103', 'loss-blowup', 'divergence', 'critical', ['train_loss'], 'Train loss above 2× its window mean for more than 4 consecutive steps (LLM Foundry).', {factor: 2.0, window: 128, min_steps: 4}],
  ['CS104', 'loss-jump', 'spike', 'warning', ['train_loss'], 'Train loss more than 3× the previous value (article).', {factor: 3.0}],
  ['CS105', 'loss-spike', 'spike', 'warning', ['train_loss'], 'Train loss far above its robust (median/MAD) baseline; recovery classified fast/slow/none.', {z: 6.0, window: 128}],
  ['CS106', 'grad-norm-spike', 'spike', 'warning', ['grad_norm'], 'Gradient norm far above its robust baseline (OLMo-core |z| > 6).', {z: 6.0, window: 128}],
  ['CS201', 'grad-norm-growth', 'growth', 'critical', ['grad_norm'], 'Sustained exponential growth of the gradient norm projected to cross the threshold within the horizon.', {window: 50, min_r2: 0.8, horizon: 200}],
  ['CS302', 'update-ratio-high', 'optimizer', 'warning', ['update_ratio'], 'Parameter update ratio above 1e-1 (DeepDiagnosis).', {high: 0.1}],
  ['CS401', 'overfitting', 'overfit', 'warning', ['train_loss', 'val_loss'], 'train_loss < 0.1 and val_loss > 5 × train_loss (article).', {train_max: 0.1, ratio: 5.0}],
  ['CS402', 'val-train-divergence', 'overfit', 'warning', ['train_loss', 'val_loss'], 'Validation loss rising while train loss falls for k evaluations.', {k: 5}],
].map(([code, symbol, family, severity, signals, description, params]) => ({code, symbol, family, severity, signals, description, params}));

function write(set, runs, {configError = null, routes = {}} = {}) {
  const dir = path.join(out, set);
  fs.mkdirSync(dir, {recursive: true});
  const summary = runs.map((r) => ({
    run: r.run, health: r.health, counts: r.counts, first_critical_step: r.first_critical_step ?? null,
    signals: r.signals, sampled: r.sampled, headline: r.headline,
  }));
  const payloads = {
    'runs.json': {schema: 1, config_error: configError, runs: summary},
    'rules.json': {schema: 1, config_error: configError, rules: RULES},
    'analysis.json': Object.fromEntries(runs.map((r) => [r.run, r])),
    ...routes,
  };
  for (const [file, body] of Object.entries(payloads)) fs.writeFileSync(path.join(dir, file), JSON.stringify(body));
}

const critical = runCritical();
const spikes = runSpikes();
const ok = runOk();
const hostile = runHostile();
const keras = runKeras();
const none = runNoSignals();
// Server order is already ranked; the frontend re-ranks stably anyway.
write('default', [critical, spikes, hostile, ok, keras, none]);
write('config', [spikes, {...ok, sampled: true}, none], {configError: "crash_signals.toml: unknown key 'rules.grad-norm-threshold.treshold'"});
write('empty', []);
console.log('fixtures written to', out);
