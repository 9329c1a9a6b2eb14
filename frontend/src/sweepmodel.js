// Pure helpers of the sweep view (no DOM): value display, cell order, table rows.

const HEALTH_ORDER = {critical: 0, warning: 1, pending: 2, ok: 3, no_signals: 4};

/** Display form of a hyperparameter value: the server's (`shown`, as Python prints it: 1.0), else String(v). */
export function fmtValue(v, shown) {
  if (typeof shown === 'string') return shown;
  if (v === undefined || v === null) return '';
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  return String(v);
}

/** Compares two cells: missing last, numbers numerically, else as text. */
export function compareCells(a, b) {
  const am = a === undefined || a === null;
  const bm = b === undefined || b === null;
  if (am || bm) return am === bm ? 0 : am ? 1 : -1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, {numeric: true});
}

/** Rows of one sweep's table: {run, health, values: Map}, sorted by `sort` ({key, dir}). */
export function sweepRows(sweep, runsByName, sort) {
  const rows = sweep.runs.map((name) => {
    const r = runsByName.get(name) || {};
    const values = new Map();
    const shown = new Map();
    const hp = r.hparams && r.hparams.values && typeof r.hparams.values === 'object' ? r.hparams.values : {};
    const sh = r.shown && typeof r.shown === 'object' ? r.shown : {};
    for (const k of Object.keys(hp)) values.set(k, hp[k]);
    for (const k of Object.keys(sh)) shown.set(k, sh[k]);
    return {run: name, health: r.health || 'no_signals', values, shown};
  });
  const dir = sort && sort.dir === 'desc' ? -1 : 1;
  const key = sort ? sort.key : null;
  rows.sort((x, y) => {
    let c = 0;
    if (key === null || key === '__health') c = (HEALTH_ORDER[x.health] ?? 9) - (HEALTH_ORDER[y.health] ?? 9);
    else if (key === '__run') c = compareCells(x.run, y.run);
    else {
      const a = x.values.get(key);
      const b = y.values.get(key);
      const am = a === undefined || a === null;
      const bm = b === undefined || b === null;
      if (am !== bm) return am ? 1 : -1; // runs without the value stay last either way
      c = compareCells(a, b);
    }
    return dir * c || compareCells(x.run, y.run);
  });
  return rows;
}
