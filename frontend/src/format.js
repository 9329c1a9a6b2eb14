// Number and step formatting. Pure: no DOM, no uPlot.

/** A finite number, or null for anything else (null, "NaN", "Infinity", undefined, objects). */
export function toNum(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** Compact number for tables, titles and axis labels: 3-4 significant digits, exponent when tiny/huge. */
export function fmtNum(v) {
  if (typeof v === 'string') return v; // "NaN", "Infinity" from a non-finite payload
  const x = toNum(v);
  if (x === null) return '–';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) {
    const [m, e] = x.toExponential(2).split('e');
    return `${m.replace(/\.?0+$/, '')}e${e.replace('+', '')}`;
  }
  if (Number.isInteger(x) && a < 1e5) return String(x);
  const digits = a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : 4;
  return String(Number(x.toFixed(digits)));
}

/** Axis tick label; uPlot passes null for ticks its log filter hides. */
export function fmtAxis(v) {
  if (v === null || v === undefined) return null;
  return fmtNum(v);
}

/** Training step with thousands separators: 4120, 12,400, 1,200,000. */
export function fmtStep(v) {
  const x = toNum(v);
  if (x === null) return '–';
  const s = String(Math.round(Math.abs(x)));
  const grouped = s.length > 4 ? s.replace(/\B(?=(\d{3})+(?!\d))/g, ',') : s;
  return (x < 0 ? '-' : '') + grouped;
}

/** "4120–4188", or "4120" for a one-step episode, "4120–…" when still open. */
export function fmtSpan(start, end, open = false) {
  if (open) return `${fmtStep(start)}–…`;
  if (end === null || end === undefined || end === start) return fmtStep(start);
  return `${fmtStep(start)}–${fmtStep(end)}`;
}

/** "1 warning", "3 warnings". */
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Compact step for the x axis: 950, 4,120, 12.5k, 1.2M. */
export function fmtStepAxis(v) {
  if (v === null || v === undefined) return null;
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toPrecision(3)}k`;
  return fmtStep(v);
}

/** Linear-axis tick label with as many decimals as the tick spacing needs (0.0020, 0.0021 …). */
export function fmtTick(v, incr) {
  if (v === null || v === undefined) return null;
  if (v === 0) return '0';
  const a = Math.abs(v);
  const inc = Math.abs(incr) || a;
  if (a >= 1e5 || a < 1e-3) {
    const digits = Math.min(Math.max(Math.ceil(Math.log10(a / inc) - 1e-9), 0), 4);
    const [m, e] = v.toExponential(digits).split('e');
    return `${m.replace(/\.?0+$/, '')}e${e.replace('+', '')}`;
  }
  const decimals = Math.min(Math.max(-Math.floor(Math.log10(inc) + 1e-9), 0), 8);
  return v.toFixed(decimals);
}

/** Labels for a whole linear axis: one notation for all ticks (no "0.0010" next to "5e-4"). */
export function fmtTicks(splits, incr) {
  let big = 0;
  for (const v of splits) if (v !== null && v !== undefined && Math.abs(v) > big) big = Math.abs(v);
  const exp = big >= 1e5 || (big > 0 && big < 1e-3);
  const inc = Math.abs(incr) || big || 1;
  const decimals = Math.min(Math.max(-Math.floor(Math.log10(inc) + 1e-9), 0), 8);
  return splits.map((v) => {
    if (v === null || v === undefined) return null;
    if (v === 0) return '0';
    if (!exp) return v.toFixed(decimals);
    const digits = Math.min(Math.max(Math.ceil(Math.log10(Math.abs(v) / inc) - 1e-9), 0), 4);
    const [m, e] = v.toExponential(digits).split('e');
    return `${m.replace(/\.?0+$/, '')}e${e.replace('+', '')}`;
  });
}
