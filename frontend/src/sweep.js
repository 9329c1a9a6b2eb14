// The sweep view: per sweep, the ranked statements about what its sick runs share, and the runs x
// hyperparameters table coloured by health (sortable). A click on a statement filters the run list
// to the statement's group; a click on a row opens that run. Run names and hyperparameter names and
// values come from the logdir: textContent and attributes only.

import './sweep.css';

import {el, clear} from './dom.js';
import {plural} from './format.js';
import {fmtValue, sweepRows} from './sweepmodel.js';

const HEALTH_TEXT = {critical: 'critical', warning: 'warning', ok: 'ok', no_signals: 'no signals', pending: 'pending'};

export class SweepView {
  /**
   * @param {{load: () => Promise<object>, onFilter: (runs: Set<string>|null, label: string|null) => void,
   *          onSelectRun: (run: string) => void}} options
   */
  constructor({load, onFilter, onSelectRun}) {
    this.load = load;
    this.onFilter = onFilter;
    this.onSelectRun = onSelectRun;
    this.payload = null;
    this.sorts = new Map(); // sweep folder -> {key, dir}
    this.active = null; // {sweep, index} of the statement filtering the run list
    this.root = el('div', {class: 'cs-sweep-view', attrs: {'data-sweep-view': '1'}});
  }

  async refresh() {
    clear(this.root);
    this.root.appendChild(el('div', {class: 'cs-loading', text: 'Reading hyperparameters…'}));
    try {
      this.payload = await this.load();
    } catch (e) {
      clear(this.root);
      this.root.appendChild(el('div', {class: 'cs-banner cs-banner-error', text: `Could not read the sweeps: ${e && e.message ? e.message : e}`}));
      return;
    }
    this.render();
  }

  render() {
    clear(this.root);
    const p = this.payload || {};
    const sweeps = Array.isArray(p.sweeps) ? p.sweeps : [];
    this.runsByName = new Map((Array.isArray(p.runs) ? p.runs : []).map((r) => [r.run, r]));
    const pending = p.progress && p.progress.pending ? p.progress.pending : 0;
    if (pending) {
      this.root.appendChild(el('div', {class: 'cs-muted cs-sweep-pending', text: `${pending} runs are still being analysed; they are left out until then.`}));
    }
    if (!sweeps.length) {
      this.root.appendChild(el('div', {class: 'cs-card cs-empty', text: 'No runs to compare.'}));
      return;
    }
    for (const sweep of sweeps) this.root.appendChild(this.sweepCard(sweep));
  }

  sweepCard(sweep) {
    const card = el('section', {class: 'cs-card cs-sweep', attrs: {'data-sweep': sweep.sweep}});
    const counts = {critical: 0, warning: 0, ok: 0};
    for (const name of sweep.runs) {
      const h = (this.runsByName.get(name) || {}).health;
      if (h in counts) counts[h] += 1;
    }
    card.appendChild(
      el('div', {class: 'cs-card-head'}, [
        el('span', {class: 'cs-card-title', text: sweep.sweep === '.' ? 'logdir' : sweep.sweep, title: sweep.sweep}),
        el('span', {class: 'cs-muted', text: `${plural(sweep.runs.length, 'run')} · ${counts.critical} critical · ${plural(counts.warning, 'warning')} · ${counts.ok} ok`}),
      ]),
    );
    const statements = Array.isArray(sweep.statements) ? sweep.statements : [];
    if (statements.length) {
      const list = el('ol', {class: 'cs-sweep-statements'});
      statements.forEach((st, i) => list.appendChild(this.statementItem(sweep, st, i, false)));
      card.appendChild(list);
    }
    const tentative = Array.isArray(sweep.tentative) ? sweep.tentative : [];
    if (tentative.length) {
      const list = el('ul', {class: 'cs-sweep-statements cs-sweep-tentative'});
      tentative.forEach((st, i) => list.appendChild(this.statementItem(sweep, st, statements.length + i, true)));
      card.appendChild(list);
    }
    if (sweep.note) card.appendChild(el('p', {class: 'cs-muted cs-sweep-note', text: sweep.note}));
    else if (!statements.length && !tentative.length) card.appendChild(el('p', {class: 'cs-muted cs-sweep-note', text: 'No hyperparameter rule has enough support.'}));
    const dims = (Array.isArray(sweep.hparams) ? sweep.hparams : []).map((h) => h.hparam);
    if (dims.length) card.appendChild(this.table(sweep, dims));
    const constant = sweep.constant && typeof sweep.constant === 'object' ? Object.keys(sweep.constant) : [];
    if (constant.length) {
      const shown = sweep.constant_shown && typeof sweep.constant_shown === 'object' ? sweep.constant_shown : {};
      const text = constant.slice(0, 20).map((k) => `${k}=${fmtValue(sweep.constant[k], shown[k])}`).join(', ');
      card.appendChild(el('p', {class: 'cs-muted cs-sweep-constant', text: `constant: ${text}${constant.length > 20 ? ' …' : ''}`}));
    }
    return card;
  }

  statementItem(sweep, st, index, tentative) {
    const active = this.active && this.active.sweep === sweep.sweep && this.active.index === index;
    const meta = `${st.outcome} · ${Number(st.information_gain).toFixed(2)} bits · p=${Number(st.p_value).toPrecision(2)}`;
    const button = el('button', {
      class: `cs-sweep-statement${active ? ' cs-on' : ''}`,
      text: st.text,
      title: 'show only these runs in the run list',
      attrs: {type: 'button', 'data-statement': String(index), 'aria-pressed': active ? 'true' : 'false'},
      on: {click: () => this.toggleStatement(sweep, st, index)},
    });
    return el('li', {}, [
      button,
      el('span', {class: 'cs-muted cs-sweep-meta', text: tentative ? `not significant: ${meta} (too few runs to tell)` : meta}),
    ]);
  }

  toggleStatement(sweep, st, index) {
    const same = this.active && this.active.sweep === sweep.sweep && this.active.index === index;
    this.active = same ? null : {sweep: sweep.sweep, index};
    if (this.active) this.onFilter(new Set(Array.isArray(st.runs) ? st.runs.map(String) : []), st.condition);
    else this.onFilter(null, null);
    this.render();
  }

  clearFilter() {
    this.active = null;
    if (this.payload) this.render();
  }

  table(sweep, dims) {
    const sort = this.sorts.get(sweep.sweep) || {key: '__health', dir: 'asc'};
    const group = this.active && this.active.sweep === sweep.sweep ? this.activeGroup(sweep) : null;
    const header = (key, label) => {
      const on = sort.key === key;
      return el('th', {
        class: on ? `cs-sorted cs-sorted-${sort.dir}` : '',
        text: label,
        title: 'sort',
        attrs: {'data-sort': key, 'aria-sort': on ? (sort.dir === 'asc' ? 'ascending' : 'descending') : 'none', tabindex: '0'},
        on: {
          click: () => this.sortBy(sweep, key),
          keydown: (e) => {
            if (e.key === 'Enter' || e.key === ' ') {
              e.preventDefault();
              this.sortBy(sweep, key);
            }
          },
        },
      });
    };
    const head = el('tr', {}, [header('__health', 'health'), ...dims.map((d) => header(d, d)), header('__run', 'run')]);
    const body = el('tbody');
    for (const row of sweepRows(sweep, this.runsByName, sort)) {
      const inGroup = group ? group.has(row.run) : null;
      const tr = el('tr', {
        class: `cs-sweep-row cs-h-${row.health}${inGroup === false ? ' cs-dim' : ''}`,
        attrs: {'data-sweep-row': '1', 'data-run': row.run, 'data-health': row.health, tabindex: '0'},
        on: {
          click: () => this.onSelectRun(row.run),
          keydown: (e) => {
            if (e.key === 'Enter') this.onSelectRun(row.run);
          },
        },
      });
      tr.appendChild(el('td', {class: 'cs-sweep-health', text: HEALTH_TEXT[row.health] || row.health}));
      for (const d of dims) tr.appendChild(el('td', {text: fmtValue(row.values.get(d), row.shown.get(d)), attrs: {'data-hparam': d}}));
      tr.appendChild(el('td', {class: 'cs-sweep-run', text: row.run, title: row.run}));
      body.appendChild(tr);
    }
    return el('div', {class: 'cs-sweep-table-wrap'}, [el('table', {class: 'cs-sweep-table'}, [el('thead', {}, [head]), body])]);
  }

  activeGroup(sweep) {
    const all = [...(sweep.statements || []), ...(sweep.tentative || [])];
    const st = all[this.active.index];
    return new Set(st && Array.isArray(st.runs) ? st.runs.map(String) : []);
  }

  sortBy(sweep, key) {
    const cur = this.sorts.get(sweep.sweep);
    const dir = cur && cur.key === key && cur.dir === 'asc' ? 'desc' : 'asc';
    this.sorts.set(sweep.sweep, {key, dir});
    this.render();
  }
}
