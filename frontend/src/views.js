// DOM views (no uPlot, no fetch). Every data string goes through textContent or an attribute.

import {el} from './dom.js';
import {fmtNum, fmtSpan, fmtStep, plural, runNameSpans} from './format.js';
import {countsOf, headlineOf, incidentCountsOf, HEALTH_LABEL, isPending, severityOf, SIGNAL_LABEL, tomlSnippet} from './model.js';

const HEALTH_GLYPH = {critical: '◆', warning: '▲', pending: '◌', ok: '●', no_signals: '○'};

function healthClass(h) {
  return `cs-h-${HEALTH_LABEL[h] ? h : 'no_signals'}`;
}

/** Health pill: glyph + word, coloured; the glyph keeps it readable in greyscale. */
export function healthBadge(health) {
  return el('span', {class: `cs-badge ${healthClass(health)}`}, [
    el('span', {class: 'cs-badge-glyph', text: HEALTH_GLYPH[health] || '○', attrs: {'aria-hidden': 'true'}}),
    HEALTH_LABEL[health] || String(health),
  ]);
}

// A head longer than its ellipsis keeps a letter or two in view; a value over LONG_VALUE
// characters may be cut (style.css).
const LONG_VALUE = 10;
const NAME_SPAN_EXTRA = {
  head: (text) => (text.length > 3 ? ' cs-name-cut' : ''),
  value: (text) => (text.length > LONG_VALUE ? ' cs-name-long' : ''),
};

/** One run in the run list (data-run, data-health, data-pending are test hooks). */
export function runListItem(entry, {selected, onSelect}) {
  const c = countsOf(entry);
  const pending = isPending(entry);
  const meta = [];
  if (pending && entry.health !== 'pending') {
    // A sick run whose newest steps are still being analysed: its findings stand.
    meta.push(el('span', {class: 'cs-run-updating', text: '⟳', title: 'analysing its newest steps…'}));
  }
  // The stories when the server tells them (a dozen spikes are one), else the findings.
  const stories = incidentCountsOf(entry);
  const n = stories || c;
  const what = stories ? ['warning incident', 'critical incident'] : ['warning', 'critical finding'];
  if (n.warning) meta.push(el('span', {class: 'cs-count cs-count-warning', text: `${n.warning}▲`, title: plural(n.warning, what[0])}));
  if (n.critical) meta.push(el('span', {class: 'cs-count cs-count-critical', text: `${n.critical}◆`, title: plural(n.critical, what[1])}));
  if (entry.first_critical_step !== null && entry.first_critical_step !== undefined) {
    meta.push(el('span', {class: 'cs-first', text: fmtStep(entry.first_critical_step), title: 'first critical step'}));
  }
  if (!meta.length) meta.push(el('span', {class: 'cs-run-status', text: HEALTH_LABEL[entry.health] || ''}));
  const li = el(
    'li',
    {
      class: `cs-run${selected ? ' cs-selected' : ''}${pending ? ' cs-pending' : ''}`,
      attrs: {
        'data-run': entry.run,
        'data-health': entry.health,
        'data-pending': pending ? '1' : null,
        role: 'option',
        'aria-selected': selected ? 'true' : 'false',
        tabindex: '0',
      },
      title: `${entry.run}\n${headlineOf(entry)}`,
      on: {
        click: () => onSelect(entry.run),
        keydown: (e) => {
          // ↑/↓, j/k and Enter: the app's keyboard triage (index.js onKey)
          if (e.key === ' ') {
            e.preventDefault();
            onSelect(entry.run);
          }
        },
      },
    },
    [
      el('span', {class: `cs-dot ${healthClass(entry.health)}`, text: HEALTH_GLYPH[entry.health] || '○', attrs: {'aria-hidden': 'true'}}),
      el('span', {class: 'cs-run-name'}, runNameSpans(entry.run).map(([text, kind]) =>
        el('span', {class: `cs-name-${kind}${NAME_SPAN_EXTRA[kind]?.(text) ?? ''}`, text}))),
      el('span', {class: 'cs-run-meta'}, meta),
    ],
  );
  return li;
}

export function banner(kind, text, extra = null) {
  return el('div', {class: `cs-banner cs-banner-${kind}`, attrs: {role: kind === 'error' ? 'alert' : 'status'}}, [
    el('span', {class: 'cs-banner-icon', text: kind === 'error' ? '!' : 'i', attrs: {'aria-hidden': 'true'}}),
    el('span', {class: 'cs-banner-text', text}),
    extra,
  ]);
}

/** Title, health, one-sentence headline and a line of facts. */
export function runHeader(analysis, runEntry, link = null) {
  const c = countsOf(runEntry && runEntry.counts ? runEntry : analysis);
  const s = analysis.summary || {};
  const facts = [];
  if (c.critical) facts.push(plural(c.critical, 'critical finding'));
  if (c.warning) facts.push(plural(c.warning, 'warning'));
  const points = analysis.points || {};
  const maxPoints = Math.max(0, ...Object.values(points).filter((v) => typeof v === 'number'));
  if (maxPoints) facts.push(`${fmtStep(maxPoints)} points`);
  if (s.loss_trend) facts.push(`loss ${s.loss_trend}`);
  if (s.grad_norm_max !== null && s.grad_norm_max !== undefined) facts.push(`max grad norm ${fmtNum(s.grad_norm_max)}`);
  if (s.val_train_gap !== null && s.val_train_gap !== undefined) facts.push(`val–train gap ${fmtNum(s.val_train_gap)}`);
  const sigs = Object.entries(analysis.signals || {})
    .filter(([, ref]) => ref)
    .map(([sig, ref]) => `${SIGNAL_LABEL[sig] || sig} ← ${ref.log === true ? 'log of ' : ''}`
      + `${ref.run !== analysis.run ? `${ref.run}:` : ''}${ref.tag}`);
  return el('header', {class: 'cs-run-head'}, [
    el('div', {class: 'cs-title-row'}, [
      el('h2', {class: 'cs-run-title', text: analysis.run, title: analysis.run}),
      healthBadge(analysis.health),
      link,
    ]),
    el('p', {class: 'cs-headline', text: headlineOf({...runEntry, ...analysis, headline: (runEntry && runEntry.headline) || analysis.headline})}),
    facts.length ? el('p', {class: 'cs-meta', text: facts.join(' · '), title: sigs.join('\n')}) : null,
  ]);
}

/** A run whose tags matched no signal: its tags, and how to map them. */
export function noSignalsView(analysis) {
  const tags = analysis.tags || {};
  const lists = Object.entries(tags).map(([run, list]) =>
    el('div', {class: 'cs-tags-run'}, [
      el('div', {class: 'cs-tags-run-name', text: run}),
      list.length
        ? el('ul', {class: 'cs-tags'}, list.map((t) => el('li', {}, [el('code', {text: t})])))
        : el('p', {class: 'cs-muted', text: 'no scalar tags'}),
    ]),
  );
  return el('section', {class: 'cs-card cs-nosignals'}, [
    el('h3', {class: 'cs-card-title', text: 'No recognised signals'}),
    el('p', {
      text:
        'None of this run’s scalar tags looks like a train loss, validation loss, gradient norm, learning rate or update ratio, so no rule ran.',
    }),
    ...(lists.length ? lists : [el('p', {class: 'cs-muted', text: 'This run has no scalar tags.'})]),
    el('p', {}, ['Map them in ', el('code', {text: 'crash_signals.toml'}), ' at the logdir root, then reload:']),
    el('pre', {class: 'cs-snippet', text: tomlSnippet(tags)}),
  ]);
}

/** "Time Series ↗": TensorBoard's own dashboard on these runs and tags (a new tab; see links.js). */
export function timeSeriesLink(href, title, text = 'Time Series ↗') {
  return el('a', {
    class: 'cs-tslink',
    text,
    title,
    attrs: {href, target: '_blank', rel: 'noopener', 'data-timeseries-link': '1'},
    on: {click: (e) => e.stopPropagation(), keydown: (e) => e.stopPropagation()},
  });
}

const MANY_EPISODES = 4; // an incident with more episodes than this starts collapsed

function episodeRow(ep, index, {rules, onZoom, onReset, linkFor}) {
  const sev = ['critical', 'warning', 'info'].includes(ep.severity) ? ep.severity : 'warning';
  const desc = rules && rules[ep.code] ? rules[ep.code].description : null;
  return el(
    'tr',
    {
      class: `cs-finding cs-sev-${sev}`,
      attrs: {'data-finding': String(index), tabindex: '0', 'data-code': ep.code},
      title: 'click: zoom all charts to this finding · double-click: reset zoom',
      on: {
        click: () => onZoom(index),
        dblclick: () => onReset(),
        // a double-click resets the zoom; it should not also select the row's text
        mousedown: (e) => e.detail > 1 && e.preventDefault(),
        keydown: (e) => {
          if (e.key === 'Enter') onZoom(index);
          if (e.key === 'Escape') onReset();
        },
      },
    },
    [
      el('td', {class: 'cs-sev'}, [
        el('span', {class: `cs-sev-glyph cs-sev-${sev}`, text: sev === 'info' ? 'i' : severityOf(sev).glyph, attrs: {'aria-hidden': 'true'}}),
        el('span', {class: 'cs-sev-word', text: sev}),
      ]),
      el('td', {class: 'cs-code', text: ep.code, title: desc}),
      el('td', {class: 'cs-rule', text: ep.rule, title: desc}),
      el('td', {class: 'cs-signal', text: SIGNAL_LABEL[ep.signal] || ep.signal || ''}),
      el('td', {class: 'cs-steps', text: fmtSpan(ep.start_step, ep.end_step, ep.open)}),
      el('td', {
        class: 'cs-peak',
        text: ep.peak_value === null || ep.peak_value === undefined ? (ep.family === 'nonfinite' ? 'NaN/Inf' : '–') : fmtNum(ep.peak_value),
        title: ep.peak_step !== null && ep.peak_step !== undefined ? `at step ${fmtStep(ep.peak_step)}` : null,
      }),
      el('td', {class: 'cs-msg'}, [
        el('div', {class: 'cs-message', text: ep.message || ''}),
        ep.advice ? el('div', {class: 'cs-advice', text: `→ ${ep.advice}`}) : null,
        linkFor ? linkFor({signal: ep.signal, episodes: []}) : null,
      ]),
    ],
  );
}

/**
 * Findings grouped by incident: a headline row per incident (severity, kind, steps, lead, advice,
 * a Time Series link), its episodes beneath (collapsed when many). Rows carry data-incident /
 * data-finding (indices into the run's incidents / episodes). Episodes no incident claims (a report
 * without incidents) are listed alone.
 */
export function findingsTable(analysis, {rules, onZoom, onZoomIncident, onReset, linkFor}) {
  const episodes = analysis.episodes || [];
  const incidents = analysis.incidents || [];
  if (!episodes.length) {
    return el('section', {class: 'cs-card cs-findings'}, [
      el('div', {class: 'cs-card-head'}, [el('span', {class: 'cs-card-title', text: 'Findings'})]),
      el('p', {class: 'cs-muted cs-empty-findings', text: 'No findings: no rule fired on this run.'}),
    ]);
  }
  const head = el('tr', {}, ['', 'code', 'rule', 'signal', 'steps', 'peak', 'what happened · what to do'].map((h) => el('th', {text: h})));
  const bodies = [];
  const claimed = new Set();
  incidents.forEach((inc, k) => {
    const sev = ['critical', 'warning', 'info'].includes(inc.severity) ? inc.severity : 'warning';
    const mine = (inc.episodes || []).filter((i) => i >= 0 && i < episodes.length);
    mine.forEach((i) => claimed.add(i));
    // one episode says what its incident's headline says: folded too
    const collapsed = mine.length > MANY_EPISODES || mine.length === 1;
    const tbody = el('tbody', {class: `cs-incident-group${collapsed ? ' cs-collapsed' : ''}`, attrs: {'data-incident-group': String(k)}});
    const toggle = mine.length
      ? el('button', {
          class: 'cs-button cs-expand',
          text: collapsed ? `${plural(mine.length, 'episode')} ▸` : `${plural(mine.length, 'episode')} ▾`,
          attrs: {type: 'button', 'aria-expanded': collapsed ? 'false' : 'true'},
          on: {
            click: (e) => {
              e.stopPropagation();
              const now = !tbody.classList.contains('cs-collapsed');
              tbody.classList.toggle('cs-collapsed', now);
              toggle.setAttribute('aria-expanded', now ? 'false' : 'true');
              toggle.textContent = `${plural(mine.length, 'episode')} ${now ? '▸' : '▾'}`;
            },
          },
        })
      : null;
    const lead = inc.lead_steps && !/\b\d+ steps? early\b/.test(String(inc.headline || '')) ? `predicted ${plural(inc.lead_steps, 'step')} early` : null;
    const link = linkFor ? linkFor(inc) : null;
    tbody.appendChild(el(
      'tr',
      {
        class: `cs-incident cs-sev-${sev}`,
        attrs: {'data-incident': String(k), 'data-kind': inc.kind, tabindex: '0'},
        title: 'click: zoom all charts to this incident · double-click: reset zoom',
        on: {
          click: () => onZoomIncident(k),
          dblclick: () => onReset(),
          mousedown: (e) => e.detail > 1 && e.preventDefault(),
          keydown: (e) => {
            if (e.key === 'Enter') onZoomIncident(k);
            if (e.key === 'Escape') onReset();
          },
        },
      },
      [
        el('td', {class: 'cs-sev'}, [
          el('span', {class: `cs-sev-glyph cs-sev-${sev}`, text: sev === 'info' ? 'i' : severityOf(sev).glyph, attrs: {'aria-hidden': 'true'}}),
          el('span', {class: 'cs-sev-word', text: sev}),
        ]),
        el('td', {class: 'cs-kind', text: inc.kind, attrs: {colspan: '3'}}),
        el('td', {class: 'cs-steps', text: fmtSpan(inc.start_step, inc.end_step, inc.open)}),
        el('td', {class: 'cs-peak', text: inc.occurrences > 1 ? `${inc.occurrences}×` : ''}),
        el('td', {class: 'cs-msg'}, [
          el('div', {class: 'cs-headline-text', text: inc.headline || ''}),
          lead ? el('div', {class: 'cs-lead', text: lead}) : null,
          inc.advice ? el('div', {class: 'cs-advice', text: `→ ${inc.advice}`}) : null,
          el('div', {class: 'cs-incident-tools'}, [toggle, link]),
        ]),
      ],
    ));
    for (const i of mine) tbody.appendChild(episodeRow(episodes[i], i, {rules, onZoom, onReset, linkFor}));
    bodies.push(tbody);
  });
  const rest = episodes.map((ep, i) => i).filter((i) => !claimed.has(i));
  if (rest.length) bodies.push(el('tbody', {}, rest.map((i) => episodeRow(episodes[i], i, {rules, onZoom, onReset, linkFor}))));
  return el('section', {class: 'cs-card cs-findings'}, [
    el('div', {class: 'cs-card-head'}, [
      el('span', {class: 'cs-card-title', text: incidents.length ? `Findings · ${plural(incidents.length, 'incident')}` : 'Findings'}),
      el('span', {class: 'cs-card-hint', text: 'click a row to zoom · double-click to reset · ↑/↓ or j/k: runs · Enter: first incident'}),
    ]),
    el('table', {class: 'cs-table'}, [el('thead', {}, [head]), ...bodies]),
  ]);
}
