// uPlot charts of one run: options per chart kind, overlays wired through plugins, x-range sync.

import uPlot from 'uplot';
import {chartData, chartIdFor, clippedPoints, fitLine, nonfiniteMarks, shownFits, SIGNAL_LABEL, storyRange} from './model.js';
import {fmtLog, fmtNum, fmtStep, fmtStepAxis, fmtTicks, logSplits} from './format.js';
import {clipPlugin, fitPlugin, hbandPlugin, incidentsPlugin, nonfinitePlugin, thresholdPlugin} from './overlays.js';
import {PALETTES} from './theme.js';

const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';

// Steps are whole numbers: x ticks every 1, 2, 5 × 10^k steps (not 2.5, which labels round to 3).
const STEP_INCRS = [];
for (let e = 0; e <= 12; e++) for (const m of [1, 2, 5]) STEP_INCRS.push(m * 10 ** e);

function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

function axis(format, size, pal, log = false, t = null) {
  const a = {
    stroke: pal.axis,
    font: FONT,
    size,
    gap: 4,
    grid: {stroke: pal.grid, width: 1},
    ticks: {stroke: pal.tick, width: 1, size: 4},
    values: (u, splits, ai, space, incr) => format(splits, incr),
  };
  if (log) {
    // Our own splits: decades (every k-th when crowded), 1-2-5 steps or spread values on narrow
    // ranges, so any range from 1e-12 to 1e38 gets labelled ticks and a grid.
    a.splits = (u, ai, min, max) =>
      logSplits(10 ** min, 10 ** max, Math.max(2, Math.floor(u.bbox.height / devicePx() / 22))).map(Math.log10);
    a.values = (u, splits) => splits.map((v) => fmtLog(10 ** v));
  } else if (t && t.factor !== 1) {
    a.values = (u, splits, ai, space, incr) => format(splits.map(t.bwd), incr * t.factor);
  }
  return a;
}

function devicePx() {
  return (typeof devicePixelRatio === 'number' && devicePixelRatio) || 1;
}

/**
 * The chart's y transform. uPlot finds no tick increment for values of 1e17 and more (its axes
 * vanish on a diverged run), so log charts plot log10(v) on a linear scale and linear charts with
 * huge values plot v / 10^k; axis labels, legend and overlays map back.
 */
export function yTransform(log, columns) {
  if (log) return {log: true, factor: 1, fwd: (v) => Math.log10(v), bwd: (v) => 10 ** v};
  let big = 0;
  for (const col of columns) for (const v of col) if (v !== null && Math.abs(v) > big) big = Math.abs(v);
  const k = big > 1e12 ? Math.ceil(Math.log10(big)) - 12 : 0;
  const factor = 10 ** k;
  return {log: false, factor, fwd: (v) => v / factor, bwd: (v) => v * factor};
}

function transformed(data, t) {
  return data.map((col, i) => (i === 0 ? col : col.map((v) => (v === null || v === undefined ? null : t.fwd(v)))));
}

/** y range (in scale units) covering the data plus reference values (threshold, healthy band) that must show. */
function yRange(t, extras) {
  return (u, dmin, dmax) => {
    let lo = dmin;
    let hi = dmax;
    for (const v of extras) {
      if (v === null || v === undefined || !Number.isFinite(v) || (t.log && v <= 0)) continue;
      const x = t.fwd(v);
      lo = lo === null || lo === undefined ? x : Math.min(lo, x);
      hi = hi === null || hi === undefined ? x : Math.max(hi, x);
    }
    if (lo === null || lo === undefined || hi === null || hi === undefined) return t.log ? [-1, 1] : [0, 1];
    if (t.log) {
      // whole decades, as uPlot's own log ranges
      const a = Math.floor(lo + 1e-9);
      const b = Math.ceil(hi - 1e-9);
      return b > a ? [a, b] : [a, a + 1];
    }
    return uPlot.rangeNum(lo, hi, 0.1, true);
  };
}

/**
 * Builds one chart. `spec` is a CHARTS entry; `ctx` carries the run's analysis and view state:
 * {analysis, charts, extent, smoothing, log, width, height, syncKey, onSelectIncident, group,
 *  theme, crashStep, fullRange}.
 */
export function makeChart(target, spec, ctx) {
  const {analysis, log} = ctx;
  const pal = PALETTES[ctx.theme] || PALETTES.light;
  const shaped = chartData(analysis, spec, {smoothing: ctx.smoothing, log, extent: ctx.extent});
  const {cols, band} = shaped;
  const t = yTransform(log, shaped.data.slice(1));
  const data = transformed(shaped.data, t);
  const shown = (u, v) => fmtNum(v === null || v === undefined ? v : t.bwd(v));

  const series = [{label: 'step', value: (u, v) => (v === null ? '–' : fmtStep(v))}];
  const hidden = [];
  cols.slice(1).forEach((c, i) => {
    const color = pal[c.signal] || pal.train_loss;
    const isVal = c.signal === 'val_loss';
    if (c.role === 'raw') {
      hidden.push(i + 1);
      series.push({
        label: `${SIGNAL_LABEL[c.signal]} (raw)`,
        // raw train noise stays faint so the smoothed line, validation and the gap band read on top
        stroke: alpha(color, isVal ? 0.35 : 0.2),
        width: 1,
        spanGaps: true,
        points: {show: false},
        value: shown,
      });
    } else if (c.role === 'smooth') {
      const sparse = (analysis.series[c.signal]?.steps?.length || 0) < 120;
      series.push({
        label: SIGNAL_LABEL[c.signal],
        stroke: color,
        width: isVal ? 2 : 1.5,
        dash: isVal ? [6, 3] : undefined,
        spanGaps: true,
        points: {show: sparse, size: isVal ? 5 : 4, fill: color},
        value: shown,
      });
    } else {
      hidden.push(i + 1);
      series.push({label: c.role, stroke: 'transparent', width: 0, spanGaps: true, points: {show: false}});
    }
  });

  const present = spec.signals.filter((s) => analysis.series[s]?.steps?.length);
  const chartFits = shownFits(analysis.fits, analysis.incidents).filter((f) => chartIdFor(f.signal, ctx.charts) === spec.id);
  const marks = [];
  for (const sig of spec.signals) marks.push(...nonfiniteMarks((analysis.nonfinite || {})[sig]));
  marks.sort((a, b) => a.step - b.step);

  const extras = [];
  const plugins = [];
  const threshold = (analysis.thresholds || {})[spec.signals[0]];
  if (threshold !== undefined && threshold !== null) {
    extras.push(threshold);
    plugins.push(thresholdPlugin({value: threshold, label: `threshold ${fmtNum(threshold)}`, color: pal.fit, fwd: t.fwd}));
  }
  const hb = (analysis.bands || {})[spec.signals[0]];
  if (Array.isArray(hb) && hb.length === 2) {
    extras.push(hb[0], hb[1]);
    plugins.push(hbandPlugin({lo: hb[0], hi: hb[1], fill: pal.band, edge: pal.bandEdge, fwd: t.fwd}));
  }

  // Story-first: a crashed run opens on the values before the crash (and the fit up to its crossing).
  const raw = present.map((s) => analysis.series[s]);
  const storyExtras = [...extras];
  for (const f of chartFits) storyExtras.push(...fitLine(f).values);
  const story = ctx.fullRange ? null : storyRange(raw, ctx.crashStep, storyExtras, log);
  const clipped = story ? clippedPoints(raw, story.min, story.max) : null;
  if (clipped) plugins.push(clipPlugin({points: clipped.points, color: pal.clip}));

  if (chartFits.length) plugins.push(fitPlugin({fits: chartFits, color: pal.fit, backColor: pal.fitBack, halo: pal.card, fwd: t.fwd}));
  if (marks.length) plugins.push(nonfinitePlugin({marks, color: pal.nonfinite}));
  const incidents = (analysis.incidents || []).map((inc, index) => ({inc, index}));
  plugins.push(incidentsPlugin({
    incidents,
    episodes: analysis.episodes || [],
    labelled: (inc) => chartIdFor(inc.signal, ctx.charts) === spec.id || (!chartIdFor(inc.signal, ctx.charts) && spec === ctx.charts[0]),
    extent: ctx.extent,
    onSelect: ctx.onSelectIncident,
  }));

  const markScale = (u) => {
    // test hook: the y range drawn, and whether it is the story-first one
    target.setAttribute('data-y-min', String(t.bwd(u.scales.y.min)));
    target.setAttribute('data-y-max', String(t.bwd(u.scales.y.max)));
    target.setAttribute('data-y-story', story ? '1' : '0');
  };
  const yAxis = axis(fmtTicks, 56, pal, log, t);
  const yValues = yAxis.values;
  yAxis.values = (...args) => {
    const labels = yValues(...args);
    // test hook: the y tick labels drawn (they are canvas text)
    target.setAttribute('data-y-ticks', JSON.stringify(labels.filter((l) => l !== null && l !== undefined)));
    return labels;
  };
  const opts = {
    width: ctx.width,
    height: ctx.height,
    scales: {
      x: {time: false},
      y: {distr: 1, range: story ? () => [t.fwd(story.min), t.fwd(story.max)] : yRange(t, extras)},
    },
    axes: [{...axis((splits) => splits.map(fmtStepAxis), 28, pal), incrs: STEP_INCRS}, yAxis],
    series,
    bands: band ? [{series: band, fill: pal.gap}] : [],
    cursor: {
      sync: {key: ctx.syncKey, setSeries: false},
      drag: {x: true, y: false, setScale: true},
      points: {size: 5},
    },
    legend: {show: true, live: true},
    plugins,
    hooks: {
      setScale: [(u, key) => key === 'x' && ctx.group && ctx.group.onScale(u), (u, key) => key === 'y' && markScale(u)],
      ready: [
        (u) => {
          // Raw and band-edge series stay out of the legend; the smoothed line speaks for them.
          const rows = u.root.querySelectorAll('.u-legend .u-series');
          for (const i of hidden) if (rows[i]) rows[i].style.display = 'none';
          if (band && rows[band[0]]) {
            // the gap band gets its own key, a filled swatch
            const row = rows[band[0]];
            row.style.display = '';
            row.classList.add('cs-legend-gap');
            const marker = row.querySelector('.u-marker');
            if (marker) marker.style.setProperty('background', pal.gap, 'important');
            const label = row.querySelector('.u-label');
            if (label) label.textContent = 'val–train gap';
            const value = row.querySelector('.u-value');
            if (value) value.style.display = 'none';
          }
          markScale(u);
        },
      ],
    },
  };
  const u = new uPlot(opts, data, target);
  u._csSpec = spec;
  u._csCols = cols;
  u._csStory = story;
  u._csT = t;
  u._csPeak = clipped ? clipped.peak : null;
  return u;
}

/** Recomputes a chart's data (new smoothing) without touching its scales or overlays. */
export function updateChartData(u, analysis, spec, {smoothing, log, extent}) {
  const {data} = chartData(analysis, spec, {smoothing, log, extent});
  u.setData(transformed(data, u._csT), false);
  u.redraw(false, true);
}

/** Keeps the x range of a set of charts together (drag-zoom, double-click, finding clicks). */
export class ChartGroup {
  constructor() {
    this.charts = [];
    this.syncing = false;
    this.onChange = null;
  }

  add(u) {
    this.charts.push(u);
  }

  onScale(src) {
    if (this.syncing) return;
    const {min, max} = src.scales.x;
    this.setX(min, max, src);
    if (this.onChange) this.onChange(min, max);
  }

  setX(min, max, src = null) {
    this.syncing = true;
    try {
      for (const u of this.charts) {
        if (u === src) continue;
        u.setScale('x', {min, max});
      }
    } finally {
      this.syncing = false;
    }
  }

  resize(widthOf) {
    for (const u of this.charts) u.setSize({width: widthOf(u), height: u.height});
  }

  destroy() {
    for (const u of this.charts) u.destroy();
    this.charts = [];
  }
}
