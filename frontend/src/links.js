// Links from the tab into TensorBoard's own Time Series dashboard. Pure: no DOM.
//
// TensorBoard (2.x webapp) reads a dashboard's deep link from the query string and the dashboard
// from the hash: `?runFilter=RE&tagFilter=RE&pinnedCards=[...]#timeseries` (its metrics deep-link
// provider deserialises `pinnedCards`, `smoothing`, `tagFilter`, `runFilter`). Both filters are
// regexes. The tab lives at ROOT/data/plugin/crash_signals/ (the iframe's <base>), so ROOT is
// `../../../` from there, under any --path_prefix. `smoothing` is left out on purpose: TensorBoard
// keeps it in its saved settings, and a link should not change the user's smoothing for good.

/** A regex that matches exactly one of `names` (escaped), e.g. ^(?:train/loss|eval/loss)$. */
export function exactRegex(names) {
  const parts = [...new Set(names.map(String))].map((s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'));
  if (!parts.length) return '';
  return parts.length === 1 ? `^${parts[0]}$` : `^(?:${parts.join('|')})$`;
}

/** The (run, tag) pairs of an analysis' signals, optionally only `signals` (e.g. an incident's). */
export function signalRefs(analysis, signals = null) {
  const refs = [];
  for (const [sig, ref] of Object.entries((analysis && analysis.signals) || {})) {
    if (!ref || typeof ref.run !== 'string' || typeof ref.tag !== 'string') continue;
    if (signals && !signals.includes(sig)) continue;
    refs.push({signal: sig, run: ref.run, tag: ref.tag});
  }
  return refs;
}

/**
 * Relative URL of TensorBoard's Time Series filtered to `refs`' runs and tags; `pinned` tags
 * become pinned scalar cards (shown first).
 */
export function timeSeriesHref(refs, {pinned = [], root = '../../../'} = {}) {
  const params = new URLSearchParams();
  const runs = refs.map((r) => r.run);
  const tags = refs.map((r) => r.tag);
  if (runs.length) params.set('runFilter', exactRegex(runs));
  if (tags.length) params.set('tagFilter', exactRegex(tags));
  const pins = [...new Set(pinned)].map((tag) => ({plugin: 'scalars', tag}));
  if (pins.length) params.set('pinnedCards', JSON.stringify(pins));
  const query = params.toString();
  return `${root}${query ? `?${query}` : ''}#timeseries`;
}

/** Signals an incident is about: its own and those of its episodes. */
export function incidentSignals(analysis, incident) {
  const eps = (analysis && analysis.episodes) || [];
  const sigs = [incident.signal, ...(incident.episodes || []).map((i) => eps[i] && eps[i].signal)];
  return [...new Set(sigs.filter((s) => typeof s === 'string'))];
}
