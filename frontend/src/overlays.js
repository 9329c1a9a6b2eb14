// uPlot plugins, one per overlay kind. Each is a factory taking its data through its options and
// returning {hooks} (uPlot.d.ts `Plugin`). Canvas overlays draw in the `draw`/`drawAxes` hooks,
// clipped to u.bbox, in device pixels; DOM overlays live in u.over and are re-placed in
// drawClear/setScale. Text reaches the DOM through textContent and attributes only. Overlays with a y
// take `fwd` (data value -> y-scale value): charts plot log10 of the values on log charts.

import {cameBack, episodeBox, fitLine, fitLabel, projectsAhead, severityOf} from './model.js';
import {fmtNum, fmtSpan, fmtStep} from './format.js';

const FONT = 'Roboto, "Helvetica Neue", Arial, sans-serif';

// `fwd`: data value -> the chart's y-scale value (charts.js plots log10 on log charts).
const identity = (v) => v;

function pxr() {
  return (typeof devicePixelRatio === 'number' && devicePixelRatio) || 1;
}

function withClip(u, fn) {
  const {ctx} = u;
  const {left, top, width, height} = u.bbox;
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top, width, height);
  ctx.clip();
  try {
    fn(ctx, u.bbox);
  } finally {
    ctx.restore();
  }
}

function plotWidth(u) {
  return u.bbox.width / pxr();
}

/**
 * Incidents as DOM spans: a light wash over the steps each covers on every chart and, where
 * `labelled(inc)` holds (the chart of its signal), a label "◆ divergence · from 1127, ongoing" at
 * the top edge that selects it. One span per incident, however many episodes it gathers.
 * opts.incidents: [{inc, index}] (index into the run's incidents, exposed as data-incident).
 */
export function incidentsPlugin({incidents = [], episodes = [], labelled = () => true, extent = null, onSelect = null} = {}) {
  let items = null;

  function create(u) {
    items = incidents.map(({inc, index}) => {
      const sev = ['critical', 'warning', 'info'].includes(inc.severity) ? inc.severity : 'warning';
      const el = document.createElement('div');
      el.className = `cs-inc cs-inc-${sev}`;
      el.setAttribute('data-incident', String(index));
      el.setAttribute('data-kind', String(inc.kind ?? ''));
      el.setAttribute('data-severity', sev);
      el.setAttribute('data-start-step', String(inc.start_step));
      el.title = `${inc.headline || ''}${inc.advice ? `\n→ ${inc.advice}` : ''}`;
      let label = null;
      if (labelled(inc)) {
        label = document.createElement('span');
        label.className = 'cs-inc-label';
        label.setAttribute('role', 'button');
        label.setAttribute('data-incident-label', String(index));
        label.textContent = `${sev === 'info' ? 'i' : severityOf(sev).glyph} ${inc.kind} · ${fmtSpan(inc.start_step, inc.end_step, inc.open)}`;
        label.setAttribute('aria-label', `${inc.kind} incident, ${fmtSpan(inc.start_step, inc.end_step, inc.open)}`);
        if (onSelect) {
          label.addEventListener('mousedown', (e) => e.stopPropagation());
          label.addEventListener('click', (e) => {
            e.stopPropagation();
            onSelect(index);
          });
        }
        el.appendChild(label);
      }
      // Repeated events (spikes): no wash over the whole span, a tick at each occurrence instead.
      const steps = inc.occurrences > 1
        ? [...new Set((inc.episodes || []).map((i) => episodes[i] && episodes[i].start_step).filter((v) => v != null))]
        : [];
      const ticks = steps.map((step) => {
        const t = document.createElement('div');
        t.className = 'cs-inc-occurrence';
        el.appendChild(t);
        return {step, t};
      });
      el.classList.toggle('cs-inc-repeated', ticks.length > 0);
      u.over.appendChild(el);
      return {inc, el, label, ticks};
    });
  }

  function place(u) {
    if (!items) create(u);
    const w = plotWidth(u);
    const lanes = [];
    for (const {inc, el, label, ticks} of items) {
      const end = inc.open && extent ? Math.max(extent.max, inc.end_step ?? inc.start_step) : inc.end_step ?? inc.start_step;
      const x0 = u.valToPos(inc.start_step, 'x');
      const x1 = u.valToPos(end, 'x');
      const box = episodeBox(x0, x1, w);
      el.style.display = box.visible ? '' : 'none';
      if (!box.visible) continue;
      el.classList.toggle('cs-inc-tick', box.kind === 'tick');
      el.style.left = `${box.left}px`;
      el.style.width = `${box.width}px`;
      for (const {step, t} of ticks) t.style.left = `${u.valToPos(step, 'x') - box.left}px`;
      if (!label) continue;
      // Labels that would overlap go to the next lane down; a label near the right edge grows leftwards.
      const width = 7 * label.textContent.length + 10;
      const right = box.left + width > w;
      const gx0 = right ? box.left + box.width - width : box.left;
      let lane = 0;
      while (lanes.some((l) => l.lane === lane && gx0 < l.x1 && gx0 + width > l.x0)) lane += 1;
      lanes.push({lane, x0: gx0, x1: gx0 + width});
      label.classList.toggle('cs-inc-label-left', right);
      el.style.setProperty('--lane', String(lane));
    }
  }

  return {
    hooks: {
      ready: [place],
      drawClear: [place],
      setScale: [(u, key) => key === 'x' && items && place(u)],
    },
  };
}

/**
 * Story-first view: the points beyond the y range (after a crash) as small arrows at the edge,
 * thinned to one per 4 px (the chart's head names the peak).
 */
export function clipPlugin({points = [], color = '#6a1b9a'} = {}) {

  function draw(u) {
    if (!points.length) return;
    const r = pxr();
    const s = 4 * r;
    withClip(u, (ctx, bb) => {
      ctx.fillStyle = color;
      const last = {top: -Infinity, bottom: -Infinity};
      ctx.beginPath();
      for (const p of points) {
        const x = u.valToPos(p.step, 'x', true);
        if (x < bb.left - s || x > bb.left + bb.width + s || x - last[p.edge] < s) continue;
        last[p.edge] = x;
        const y = p.edge === 'top' ? bb.top + 1 : bb.top + bb.height - 1;
        const base = p.edge === 'top' ? y + s * 1.4 : y - s * 1.4;
        ctx.moveTo(x, y);
        ctx.lineTo(x - s * 0.7, base);
        ctx.lineTo(x + s * 0.7, base);
        ctx.closePath();
      }
      ctx.fill();
    });
  }

  return {hooks: {draw: [draw]}};
}

/**
 * Growth fits: the fitted window solid, its extension to the projected threshold crossing dashed,
 * and a DOM label "explodes in ~N steps" (data-fit, data-projected-step) at the crossing; a growth
 * the run came back from (`cameBack`) only over its window, in `backColor`, with no crossing.
 */
export function fitPlugin({fits = [], color = '#c62828', backColor = '#e69500', halo = '#fff', scale = 'y',
  fwd = identity} = {}) {
  const lines = fits.map((fit) => ({fit, line: fitLine(fit)}));
  let labels = null;

  function draw(u) {
    const r = pxr();
    withClip(u, (ctx) => {
      for (const {fit, line} of lines) {
        if (!line.steps.length) continue;
        ctx.strokeStyle = cameBack(fit) ? backColor : color;
        ctx.lineWidth = 2 * r;
        const seg = (a, b) => {
          const out = [];
          for (let i = 0; i <= 24; i++) {
            const st = a + ((b - a) * i) / 24;
            const v = fit.start_value * Math.exp(fit.growth_per_step * (st - fit.start_step));
            out.push([u.valToPos(st, 'x', true), u.valToPos(fwd(v), scale, true)]);
          }
          return out;
        };
        const s0 = line.steps[0];
        const s1 = line.steps[line.steps.length - 1];
        const mid = Math.min(Math.max(fit.end_step ?? s1, s0), s1);
        for (const [part, dash] of [[seg(s0, mid), []], [seg(mid, s1), [5 * r, 4 * r]]]) {
          if (part[0][0] === part[part.length - 1][0]) continue;
          ctx.setLineDash(dash);
          ctx.beginPath();
          part.forEach(([x, y], i) => (i ? ctx.lineTo(x, y) : ctx.moveTo(x, y)));
          ctx.stroke();
        }
        ctx.setLineDash([]);
        if (fit.projected_step !== null && fit.projected_step !== undefined && !cameBack(fit)) {
          const last = line.steps.length - 1;
          const x = u.valToPos(line.steps[last], 'x', true);
          const y = u.valToPos(fwd(line.values[last]), scale, true);
          ctx.fillStyle = halo;
          ctx.beginPath();
          ctx.arc(x, y, 4 * r, 0, 2 * Math.PI);
          ctx.fill();
          ctx.stroke();
        }
      }
    });
  }

  function place(u) {
    if (!labels) {
      labels = lines.map(({fit}) => {
        const el = document.createElement('div');
        el.className = 'cs-fit-label';
        el.setAttribute('data-fit', String(fit.code ?? ''));
        el.setAttribute('data-projected-step', String(fit.projected_step ?? ''));
        el.setAttribute('data-severity', String(fit.severity ?? 'critical'));
        el.textContent = fitLabel(fit);
        const parts = [
          `${fit.code ?? ''} growth fit over steps ${fmtStep(fit.start_step)}–${fmtStep(fit.end_step)}`,
        ];
        if (fit.doubling_steps != null) parts.push(`doubling every ${fmtNum(fit.doubling_steps)} steps`);
        if (fit.r2 != null) parts.push(`r² ${fmtNum(fit.r2)}`);
        if (fit.projected_step != null) {
          parts.push(`projected to cross ${fmtNum(fit.threshold)} at step ${fmtStep(fit.projected_step)}`);
        }
        el.title = parts.join('\n');
        u.over.appendChild(el);
        return el;
      });
    }
    const w = plotWidth(u);
    const h = u.bbox.height / pxr();
    const placed = [];
    lines.forEach(({fit, line}, i) => {
      const el = labels[i];
      // A fit made at the threshold projects nothing: its line is drawn, unlabelled.
      if (!line.steps.length || !projectsAhead(fit)) {
        el.style.display = 'none';
        return;
      }
      const last = line.steps.length - 1;
      const x = u.valToPos(line.steps[last], 'x');
      const y = u.valToPos(fwd(line.values[last]), scale);
      const right = x > w - 140;
      const left = right ? x - 8 - 130 : x + 8;
      // two fits crossing near each other: the later label moves down a line, and is left out
      // where no line is free inside the plot
      let top = Math.min(Math.max(0, y), h - 17);
      while (placed.some((p) => Math.abs(p.top - top) < 17 && Math.abs(p.left - left) < 130)) top += 17;
      const visible = x >= -1 && x <= w + 1 && top <= h - 17;
      el.style.display = visible ? '' : 'none';
      if (!visible) return;
      placed.push({top, left});
      el.style.left = `${right ? x - 8 : x + 8}px`;
      el.style.top = `${top}px`;
      el.classList.toggle('cs-fit-label-left', right);
    });
  }

  return {
    hooks: {
      draw: [draw],
      ready: [place],
      drawClear: [place],
    },
  };
}

/** A horizontal reference line (e.g. the explosion threshold) with a label at its right end. */
export function thresholdPlugin({value, label = '', color = '#c62828', scale = 'y', fwd = identity} = {}) {
  return {
    hooks: {
      draw: [
        (u) => {
          if (value === null || value === undefined) return;
          const r = pxr();
          withClip(u, (ctx, bb) => {
            const y = Math.round(u.valToPos(fwd(value), scale, true)) + 0.5;
            ctx.strokeStyle = color;
            ctx.lineWidth = 1 * r;
            ctx.setLineDash([2 * r, 3 * r]);
            ctx.beginPath();
            ctx.moveTo(bb.left, y);
            ctx.lineTo(bb.left + bb.width, y);
            ctx.stroke();
            ctx.setLineDash([]);
            if (label) {
              ctx.font = `${10 * r}px ${FONT}`;
              ctx.fillStyle = color;
              ctx.textAlign = 'left';
              const below = y - bb.top < 14 * r;
              ctx.textBaseline = below ? 'top' : 'bottom';
              ctx.fillText(label, bb.left + 4 * r, below ? y + 2 * r : y - 2 * r);
            }
          });
        },
      ],
    },
  };
}

/** A shaded horizontal band between two values (e.g. the healthy update-ratio range). */
export function hbandPlugin({lo, hi, fill = 'rgba(46, 125, 50, 0.08)', edge = 'rgba(46, 125, 50, 0.35)', scale = 'y', fwd = identity} = {}) {
  return {
    hooks: {
      drawAxes: [
        (u) => {
          if (lo == null && hi == null) return;
          const r = pxr();
          withClip(u, (ctx, bb) => {
            // a one-sided band (only a low or only a high limit) runs to the plot's edge
            const y0 = hi == null ? bb.top : u.valToPos(fwd(hi), scale, true);
            const y1 = lo == null ? bb.top + bb.height : u.valToPos(fwd(lo), scale, true);
            ctx.fillStyle = fill;
            ctx.fillRect(bb.left, y0, bb.width, y1 - y0);
            ctx.strokeStyle = edge;
            ctx.lineWidth = r;
            ctx.setLineDash([4 * r, 4 * r]);
            for (const [v, y] of [[hi, y0], [lo, y1]]) {
              if (v == null) continue;
              ctx.beginPath();
              ctx.moveTo(bb.left, Math.round(y) + 0.5);
              ctx.lineTo(bb.left + bb.width, Math.round(y) + 0.5);
              ctx.stroke();
            }
            ctx.setLineDash([]);
          });
        },
      ],
    },
  };
}

/**
 * Non-finite values (they have no y): a red cross at the plot's top edge (NaN, +Inf) or bottom
 * edge (-Inf) at each step, drawn on the canvas because a crashed run can have thousands.
 */
export function nonfinitePlugin({marks = [], color = '#d32f2f'} = {}) {
  return {
    hooks: {
      draw: [
        (u) => {
          if (!marks.length) return;
          const r = pxr();
          const s = 3.5 * r;
          withClip(u, (ctx, bb) => {
            ctx.strokeStyle = color;
            ctx.lineWidth = 1.5 * r;
            let lastX = {top: -Infinity, bottom: -Infinity};
            ctx.beginPath();
            for (const m of marks) {
              const x = u.valToPos(m.step, 'x', true);
              if (x < bb.left - s || x > bb.left + bb.width + s) continue;
              if (x - lastX[m.edge] < 2 * s) continue;
              lastX[m.edge] = x;
              const y = m.edge === 'top' ? bb.top + s + 1 : bb.top + bb.height - s - 1;
              ctx.moveTo(x - s, y - s);
              ctx.lineTo(x + s, y + s);
              ctx.moveTo(x + s, y - s);
              ctx.lineTo(x - s, y + s);
            }
            ctx.stroke();
          });
        },
      ],
    },
  };
}
