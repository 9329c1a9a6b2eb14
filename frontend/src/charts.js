// uPlot charts of one run: options per chart kind, overlays wired through plugins, x-range sync.

import uPlot from 'uplot';
import {chartData, chartIdFor, nonfiniteMarks, SIGNAL_LABEL} from './model.js';
import {fmtAxis, fmtNum, fmtStep, fmtStepAxis, fmtTicks} from './format.js';
import {episodesPlugin, fitPlugin, hbandPlugin, nonfinitePlugin, thresholdPlugin} from './overlays.js';

const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';

export const COLORS = {
  train_loss: '#0077bb',
  val_loss: '#009988',
  grad_norm: '#0077bb',
  lr: '#33bbee',
  update_ratio: '#0077bb',
  gap: 'rgba(238, 51, 119, 0.16)',
};

function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

const isDecade = (v) => v > 0 && Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;

/** Log axes: grid, ticks and labels on decades only, thinned to every k-th decade when crowded. */
function decadesOnly(u, splits) {
  const decades = splits.filter((v) => v !== null && isDecade(v));
  const height = u.bbox.height / ((typeof devicePixelRatio === 'number' && devicePixelRatio) || 1);
  const room = Math.max(1, Math.floor(height / 18));
  const k = Math.max(1, Math.ceil(decades.length / room));
  return splits.map((v) => (v !== null && isDecade(v) && Math.round(Math.log10(v)) % k === 0 ? v : null));
}

function axis(format, size, log = false) {
  const a = {
    stroke: '#616161',
    font: FONT,
    size,
    gap: 4,
    grid: {stroke: '#eeeeee', width: 1},
    ticks: {stroke: '#e0e0e0', width: 1, size: 4},
    values: (u, splits, ai, space, incr) => format(splits, incr),
  };
  if (log) {
    // uPlot puts a grid line at every 1..9 × 10^k; decades are enough.
    a.grid.filter = decadesOnly;
    a.ticks.filter = decadesOnly;
    a.filter = decadesOnly;
    a.values = (u, splits) => splits.map((v) => (v === null ? null : fmtAxis(v)));
  }
  return a;
}

/** y range covering the data plus reference values (threshold, healthy band) that must show. */
function yRange(log, extras) {
  return (u, dmin, dmax) => {
    let lo = dmin;
    let hi = dmax;
    for (const v of extras) {
      if (v === null || v === undefined || !Number.isFinite(v) || (log && v <= 0)) continue;
      lo = lo === null || lo === undefined ? v : Math.min(lo, v);
      hi = hi === null || hi === undefined ? v : Math.max(hi, v);
    }
    if (lo === null || lo === undefined || hi === null || hi === undefined) return log ? [0.1, 10] : [0, 1];
    if (log) return uPlot.rangeLog(lo, hi, 10, false);
    return uPlot.rangeNum(lo, hi, 0.1, true);
  };
}

/**
 * Builds one chart. `spec` is a CHARTS entry; `ctx` carries the run's analysis and view state:
 * {analysis, charts, extent, smoothing, log, width, height, syncKey, onSelectEpisode, group}.
 */
export function makeChart(target, spec, ctx) {
  const {analysis, log} = ctx;
  const {data, cols, band} = chartData(analysis, spec, {smoothing: ctx.smoothing, log, extent: ctx.extent});

  const series = [{label: 'step', value: (u, v) => (v === null ? '–' : fmtStep(v))}];
  const hidden = [];
  cols.slice(1).forEach((c, i) => {
    const color = COLORS[c.signal] || '#0077bb';
    const dash = c.signal === 'val_loss' ? [6, 3] : undefined;
    if (c.role === 'raw') {
      hidden.push(i + 1);
      series.push({
        label: `${SIGNAL_LABEL[c.signal]} (raw)`,
        stroke: alpha(color, 0.3),
        width: 1,
        spanGaps: true,
        points: {show: false},
        value: (u, v) => fmtNum(v),
      });
    } else if (c.role === 'smooth') {
      const sparse = (analysis.series[c.signal]?.steps?.length || 0) < 120;
      series.push({
        label: SIGNAL_LABEL[c.signal],
        stroke: color,
        width: 1.5,
        dash,
        spanGaps: true,
        points: {show: sparse, size: 4, fill: color},
        value: (u, v) => fmtNum(v),
      });
    } else {
      hidden.push(i + 1);
      series.push({label: c.role, stroke: 'transparent', width: 0, spanGaps: true, points: {show: false}});
    }
  });

  const chartEpisodes = (analysis.episodes || [])
    .map((ep, index) => ({ep, index}))
    .filter(({ep}) => chartIdFor(ep.signal, ctx.charts) === spec.id);
  const chartFits = (analysis.fits || []).filter((f) => chartIdFor(f.signal, ctx.charts) === spec.id);
  const marks = [];
  for (const sig of spec.signals) marks.push(...nonfiniteMarks((analysis.nonfinite || {})[sig]));
  marks.sort((a, b) => a.step - b.step);

  const extras = [];
  const plugins = [];
  const threshold = (analysis.thresholds || {})[spec.signals[0]];
  if (threshold !== undefined && threshold !== null) {
    extras.push(threshold);
    plugins.push(thresholdPlugin({value: threshold, label: `threshold ${fmtNum(threshold)}`}));
  }
  const hb = (analysis.bands || {})[spec.signals[0]];
  if (Array.isArray(hb) && hb.length === 2) {
    extras.push(hb[0], hb[1]);
    plugins.push(hbandPlugin({lo: hb[0], hi: hb[1]}));
  }
  if (chartFits.length) plugins.push(fitPlugin({fits: chartFits}));
  if (marks.length) plugins.push(nonfinitePlugin({marks}));
  plugins.push(episodesPlugin({episodes: chartEpisodes, onSelect: ctx.onSelectEpisode}));

  const opts = {
    width: ctx.width,
    height: ctx.height,
    scales: {
      x: {time: false},
      y: {distr: log ? 3 : 1, log: 10, range: yRange(log, extras)},
    },
    axes: [axis((splits) => splits.map(fmtStepAxis), 28), axis(fmtTicks, 56, log)],
    series,
    bands: band ? [{series: band, fill: COLORS.gap}] : [],
    cursor: {
      sync: {key: ctx.syncKey, setSeries: false},
      drag: {x: true, y: false, setScale: true},
      points: {size: 5},
    },
    legend: {show: true, live: true},
    plugins,
    hooks: {
      setScale: [(u, key) => key === 'x' && ctx.group && ctx.group.onScale(u)],
      ready: [
        (u) => {
          // Raw and band-edge series stay out of the legend; the smoothed line speaks for them.
          const rows = u.root.querySelectorAll('.u-legend .u-series');
          for (const i of hidden) if (rows[i]) rows[i].style.display = 'none';
        },
      ],
    },
  };
  const u = new uPlot(opts, data, target);
  u._csSpec = spec;
  u._csCols = cols;
  return u;
}

/** Recomputes a chart's data (new smoothing) without touching its scales or overlays. */
export function updateChartData(u, analysis, spec, {smoothing, log, extent}) {
  const {data} = chartData(analysis, spec, {smoothing, log, extent});
  u.setData(data, false);
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
