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

/** "4120–4188", or "4120" for a one-step episode, "from 4120, ongoing" when still open. */
export function fmtSpan(start, end, open = false) {
  if (open) return `from ${fmtStep(start)}, ongoing`;
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

/** Decimals that write `inc` exactly (0.25 → 2, 0.00025 → 5, 2 → 0), at most `cap`. */
export function stepDecimals(inc, cap = 12) {
  const a = Math.abs(inc);
  if (!(a > 0) || !Number.isFinite(a)) return 0;
  for (let d = 0; d < cap; d++) {
    const scaled = a * 10 ** d;
    if (Math.abs(scaled - Math.round(scaled)) <= 1e-6 * scaled) return d;
  }
  return cap;
}

function expLabel(v, inc) {
  const e = Math.floor(Math.log10(Math.abs(v)) + 1e-12);
  const digits = Math.min(stepDecimals(inc / 10 ** e), 4);
  const [m, x] = v.toExponential(digits).split('e');
  return `${m.includes('.') ? m.replace(/\.?0+$/, '') : m}e${x.replace('+', '')}`;
}

/** Linear-axis tick label with as many decimals as the tick spacing needs (0.0020, 0.0021 …). */
export function fmtTick(v, incr) {
  if (v === null || v === undefined) return null;
  if (v === 0) return '0';
  const a = Math.abs(v);
  const inc = Math.abs(incr) || a;
  if (a >= 1e5 || a < 1e-3) return expLabel(v, inc);
  return v.toFixed(Math.min(stepDecimals(inc), 8));
}

/** Labels for a whole linear axis: one notation for all ticks (no "0.0010" next to "5e-4"). */
export function fmtTicks(splits, incr) {
  let big = 0;
  for (const v of splits) if (v !== null && v !== undefined && Math.abs(v) > big) big = Math.abs(v);
  const exp = big >= 1e5 || (big > 0 && big < 1e-3);
  const inc = Math.abs(incr) || big || 1;
  const decimals = Math.min(stepDecimals(inc), 8);
  return splits.map((v) => {
    if (v === null || v === undefined) return null;
    if (v === 0) return '0';
    return exp ? expLabel(v, inc) : v.toFixed(decimals);
  });
}

/** Log-axis label: decades as 1e-12 … 0.001, 0.01 … 1000, 1e4 … 1e38; 2× and 5× ticks compactly. */
export function fmtLog(v) {
  if (v === null || v === undefined) return null;
  if (!(v > 0)) return fmtNum(v);
  const k = Math.log10(v);
  const r = Math.round(k);
  if (Math.abs(k - r) < 1e-9) return r >= -3 && r <= 3 ? String(Number((10 ** r).toFixed(Math.max(0, -r)))) : `1e${r}`;
  return fmtNum(Number(v.toPrecision(3)));
}

/**
 * Tick values of a log axis over [min, max] with room for about `room` labels: every decade (or
 * every k-th, k chosen so they fit) when the range spans two decades or more, else 1-2-5 steps,
 * else evenly spaced values, so a narrow range still gets at least two labelled ticks.
 */
export function logSplits(min, max, room = 6) {
  if (!(min > 0) || !(max > min) || !Number.isFinite(max)) return [];
  const lo = Math.ceil(Math.log10(min) - 1e-9);
  const hi = Math.floor(Math.log10(max) + 1e-9);
  const roomy = Math.max(2, Math.floor(room));
  if (hi - lo >= 1) {
    const k = Math.max(1, Math.ceil((hi - lo + 1) / roomy));
    const out = [];
    for (let e = Math.ceil(lo / k) * k; e <= hi; e += k) out.push(Number(`1e${e}`));
    if (out.length >= 2) return out;
  }
  const out = [];
  for (let e = lo - 1; e <= hi; e++) {
    for (const m of [1, 2, 5]) {
      const v = Number(`${m}e${e}`);
      if (v >= min * (1 - 1e-9) && v <= max * (1 + 1e-9)) out.push(Number(v.toPrecision(12)));
    }
  }
  if (out.length >= 2 && out.length <= roomy + 1) return out;
  if (out.length > roomy + 1) return out.filter((v) => !/^2/.test(v.toExponential()));
  return [0.1, 0.5, 0.9].map((f) => Number((min * (max / min) ** f).toPrecision(3)));
}

// A run name's tail keeps at least this many characters (its last path segments): "run0" or
// "RMSprop" alone says little in a list where the next run differs only one folder up.
const RUN_TAIL_CHARS = 12;
// ... and a long tail keeps its last this many apart: a sweep's runs named by their
// hyperparameters differ at the end of the name as often as at its start.
const RUN_END_CHARS = 9;

/**
 * A run name as [head, body, end]: the tail (its last path segment, or the last few while they
 * are short: `SUB_1/RMSprop`) split into its body and, when long, its last RUN_END_CHARS
 * characters; the head what comes before it (with its slash). Empty strings where a part is
 * absent. The run list ellipsises the head first, then the body: runs of a sweep share a long
 * folder prefix and differ at their end.
 */
export function runNameParts(name) {
  const [head, tail] = headAndTail(name);
  if (tail.length <= 2 * RUN_END_CHARS) return [head, tail, ''];
  return [head, tail.slice(0, -RUN_END_CHARS), tail.slice(-RUN_END_CHARS)];
}

/** A run name's head (its folders, with their slash) and tail (its last segment, or the last
 * few while they are short). */
function headAndTail(name) {
  const s = String(name);
  let cut = s.lastIndexOf('/', s.length - 2); // a trailing slash belongs to the last segment
  while (cut > 0 && s.length - cut - 1 < RUN_TAIL_CHARS) {
    const before = s.lastIndexOf('/', cut - 1);
    if (before < 0) break;
    cut = before;
  }
  return cut <= 0 ? ['', s] : [s.slice(0, cut + 1), s.slice(cut + 1)];
}

// Between one `key=value` pair of a run name and the next: hyperparameters in names read
// `lr=0.1_bs=64`, `lr=0.1,bs=64`, `lr=0.1/seed=1`, `a=1~b=2` (never a '-' or '.': `1e-3`, `0.5`).
const PAIR_SEPARATORS = '_,;/ &~|+';

/**
 * A run name as [text, kind] spans that rejoin to it, for the run list: its head ('head'), then
 * its tail (see runNameParts) as 'key' and 'value' spans when it names hyperparameters
 * (`learning_rate=` `0.1` `_optimizer=` `Adam`), else as 'body' and 'end'. The list ellipsises
 * the head first, then the keys: in a sweep the values are what tell its runs apart.
 */
export function runNameSpans(name) {
  const [head, tail] = headAndTail(name);
  const spans = head ? [[head, 'head']] : [];
  if (!tail.includes('=')) {
    const [, body, end] = runNameParts(name);
    spans.push([body, 'body']);
    if (end) spans.push([end, 'end']);
    return spans;
  }
  let from = 0; // where the current key starts
  let eq = tail.indexOf('=');
  while (eq >= 0) {
    const next = tail.indexOf('=', eq + 1);
    // The value runs to the last separator before the next '=' (the next key's start), or to the end.
    let stop = tail.length;
    if (next >= 0) {
      stop = next;
      for (let i = next - 1; i > eq; i--) {
        if (PAIR_SEPARATORS.includes(tail[i])) {
          stop = i;
          break;
        }
      }
      if (stop === next) stop = eq + 1; // no separator: an empty value, the rest is the next key
    }
    spans.push([tail.slice(from, eq + 1), 'key']);
    if (stop > eq + 1) spans.push([tail.slice(eq + 1, stop), 'value']);
    from = stop;
    eq = next;
  }
  return spans;
}
