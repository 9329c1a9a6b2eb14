// Crash Signals tab: TensorBoard imports this module in its plugin iframe and calls render().

import 'uplot/dist/uPlot.min.css';
import './style.css';

import {makeApi, ApiError} from './api.js';
import {connectToHost} from './ipc.js';
import {el, clear} from './dom.js';
import {ChartGroup, makeChart, updateChartData} from './charts.js';
import {
  cameBack, canLog, crashStepOf, wideRange, filterRuns, isPending, lateStartNote, lossKindNote, pickSelection, presentCharts,
  perplexityNote, progressOf, progressText, rankRuns, stepExtent, valByWallTimeNote, zoomRange,
} from './model.js';
import {fmtNum, fmtStep, plural} from './format.js';
import {banner, findingsTable, noSignalsView, runHeader, runListItem, timeSeriesLink} from './views.js';
import {incidentSignals, signalRefs, timeSeriesHref} from './links.js';
import {applyTheme, watchTheme} from './theme.js';
import {SweepView} from './sweep.js'; // sweep view

const CHART_HEIGHT = 220;
// While the server lists runs as pending (big logdirs), `runs` is polled this often.
const POLL_MS = 2000;
const POLL_RETRY_MS = 10000; // after a failed poll

/** Adds <link rel="stylesheet" href="./index.css"> (relative to the plugin's <base>) once. */
function loadStylesheet() {
  return new Promise((resolve) => {
    if (document.querySelector('link[data-cs-style]')) return resolve();
    const link = el('link', {attrs: {rel: 'stylesheet', href: './index.css', 'data-cs-style': '1'}});
    const done = () => resolve();
    link.addEventListener('load', done, {once: true});
    link.addEventListener('error', done, {once: true});
    setTimeout(done, 3000);
    document.head.appendChild(link);
  });
}

class App {
  constructor(root) {
    this.api = makeApi((url, init) => fetch(url, init));
    this.root = root;
    this.state = {
      runs: [],
      progress: null, // {analysed, pending, total} of the last `runs` answer
      autoSelected: true, // the selection was not picked by the user (it may move to a sick run)
      configError: null,
      storageError: null,
      filter: '',
      selected: null,
      analysis: null,
      analysisText: null,
      smoothing: 0.6,
      log: {},
      zoom: null,
      focus: null, // 'e<i>' an episode, 'i<k>' an incident
      fullRange: false, // story-first y ranges are the default on a crashed run
      theme: 'light',
    };
    this.rules = null;
    this.group = null;
    this.seq = 0;
    this.runsSeq = 0; // `runs` fetches (refresh and poll): only the latest answer is applied
    this.pollTimer = null;
    this.build();
  }

  build() {
    this.filterInput = el('input', {
      class: 'cs-filter-input',
      attrs: {type: 'search', placeholder: 'Filter runs (regex)', 'aria-label': 'Filter runs (regex)', spellcheck: 'false'},
      on: {
        input: () => {
          this.state.filter = this.filterInput.value;
          this.renderRunList();
        },
      },
    });
    this.filterError = el('div', {class: 'cs-filter-error', attrs: {role: 'alert'}});
    this.runCount = el('div', {class: 'cs-run-count'});
    this.progressLine = el('div', {class: 'cs-progress', attrs: {role: 'status', 'aria-live': 'polite'}});
    this.runList = el('ul', {class: 'cs-runs', attrs: {role: 'listbox', 'aria-label': 'Runs'}});
    // -- sweep view: a header toggle and the run-list filter a statement sets --
    this.sweepFilter = null; // Set of run names, or null
    this.sweepButton = el('button', {
      class: 'cs-button cs-sweep-toggle', text: 'Sweep view',
      title: 'what the sick runs of each sweep have in common (hyperparameters)',
      attrs: {type: 'button', 'aria-pressed': 'false', 'data-sweep-toggle': '1'},
      on: {click: () => this.toggleSweep()},
    });
    this.sweepFilterLine = el('div', {class: 'cs-sweep-filter', attrs: {role: 'status'}});
    this.sweep = new SweepView({
      load: () => this.api.sweep(),
      onFilter: (runs, label) => this.setSweepFilter(runs, label),
      onSelectRun: (run) => this.select(run),
    });
    // -- end sweep view --
    this.banners = el('div', {class: 'cs-banners'});
    this.view = el('div', {class: 'cs-view'}, [el('div', {class: 'cs-loading', text: 'Loading runs…'})]);
    this.root.appendChild(
      el('div', {class: 'cs-app'}, [
        el('aside', {class: 'cs-sidebar'}, [
          el('div', {class: 'cs-sidebar-head'}, [
            this.filterInput, this.filterError, this.runCount, this.progressLine, this.sweepButton, this.sweepFilterLine,
          ]),
          this.runList,
        ]),
        el('main', {class: 'cs-main'}, [this.banners, this.view]),
      ]),
    );
    this.resizeObserver = new ResizeObserver(() => this.onResize());
    document.addEventListener('keydown', (e) => this.onKey(e));
  }

  // ---- theme and keyboard -------------------------------------------------------------------

  setTheme(theme) {
    this.state.theme = theme;
    applyTheme(theme);
    // canvas colours come from the palette: charts are redrawn, zoom and focus kept
    if (this.group && this.chartsEl) this.rebuildCharts();
  }

  /** ↑/↓ and j/k move through the run list, Enter opens the first incident; never inside inputs. */
  onKey(e) {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    const tag = t && t.tagName ? t.tagName.toLowerCase() : '';
    if (tag === 'input' || tag === 'textarea' || tag === 'select' || (t && t.isContentEditable)) return;
    const inList = this.runList.contains(t);
    const onControl = !inList && (tag === 'button' || tag === 'a' || (t && t.closest && t.closest('[data-finding], [data-incident], .cs-sweep')));
    if (e.key === 'ArrowDown' || e.key === 'j' || e.key === 'ArrowUp' || e.key === 'k') {
      if (onControl || this.sweepOn) return;
      e.preventDefault();
      this.moveSelection(e.key === 'ArrowDown' || e.key === 'j' ? 1 : -1);
    } else if (e.key === 'Enter' && !onControl && !this.sweepOn) {
      e.preventDefault();
      if (inList && t.hasAttribute('data-run')) this.select(t.getAttribute('data-run'));
      this.openFirstIncident();
    }
  }

  moveSelection(delta) {
    const items = [...this.runList.querySelectorAll('[data-run]')];
    if (!items.length) return;
    const at = items.findIndex((li) => li.getAttribute('data-run') === this.state.selected);
    const next = items[Math.min(items.length - 1, Math.max(0, at < 0 ? 0 : at + delta))];
    next.focus();
    next.scrollIntoView({block: 'nearest'});
    this.select(next.getAttribute('data-run'));
  }

  /** Zooms to the shown run's first incident (once its analysis is in, if it is still loading). */
  openFirstIncident() {
    const a = this.state.analysis;
    if (!a || a.run !== this.state.selected) {
      this.pendingOpen = this.state.selected;
      return;
    }
    this.pendingOpen = null;
    if (!(a.incidents || []).length) return;
    this.zoomToIncident(0);
    const row = this.view.querySelector("[data-incident='0']");
    if (row) {
      row.scrollIntoView({block: 'nearest'});
      row.focus({preventScroll: true});
    }
  }

  setLoading(on) {
    if (on) document.body.setAttribute('data-loading', '1');
    else document.body.removeAttribute('data-loading');
  }

  markReady() {
    document.body.setAttribute('data-ready', '1');
  }

  // ---- data flow ------------------------------------------------------------------------------

  /** Takes a `runs` answer: the list, progress, config error, problems and the selection. */
  applyRuns(payload) {
    this.state.runs = rankRuns(Array.isArray(payload.runs) ? payload.runs : []);
    this.state.progress = progressOf(payload);
    this.state.configError = payload.config_error || null;
    this.state.storageError = payload.storage_error || null;
    this.state.problems = Array.isArray(payload.problems) ? payload.problems.map(String) : [];
    this.state.fetchError = null;
    const before = this.state.selected;
    this.state.selected = pickSelection(this.state.runs, before, this.state.autoSelected);
    if (this.state.selected !== before) this.state.autoSelected = true;
    this.renderRunList();
  }

  /** Polls `runs` again later while some run's analysis is pending (no-op otherwise). */
  schedulePoll(delay = POLL_MS) {
    if (this.pollTimer !== null || !this.state.progress || !this.state.progress.pending) return;
    this.pollTimer = setTimeout(() => this.poll(), delay);
  }

  cancelPoll() {
    if (this.pollTimer !== null) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  /** Re-reads the run list (not the shown run, unless the selection moves to a newly found sick run). */
  async poll() {
    this.pollTimer = null;
    const mine = ++this.runsSeq;
    let payload;
    try {
      payload = await this.api.runs();
    } catch (e) {
      if (mine === this.runsSeq) this.schedulePoll(POLL_RETRY_MS);
      return;
    }
    if (mine !== this.runsSeq) return; // a refresh started meanwhile; it polls on its own
    const before = this.state.selected;
    this.applyRuns(payload);
    this.renderBanners();
    if (this.state.selected === null) this.renderNoRuns();
    else if (this.state.selected !== before) this.select(this.state.selected, false);
    this.schedulePoll();
  }

  async refresh() {
    this.cancelPoll();
    const my = ++this.seq;
    const mine = ++this.runsSeq;
    this.setLoading(true);
    try {
      const payload = await this.api.runs();
      if (my !== this.seq || mine !== this.runsSeq) return;
      this.applyRuns(payload);
      if (this.state.selected === null) {
        this.renderBanners();
        this.renderNoRuns();
      } else {
        await this.loadRun(this.state.selected, my);
      }
    } catch (e) {
      if (my !== this.seq) return;
      this.state.fetchError = e instanceof ApiError ? e.message : String(e);
      this.renderBanners();
      if (!this.state.analysis) {
        clear(this.view);
      }
    } finally {
      if (my === this.seq) {
        this.setLoading(false);
        this.markReady();
      }
      if (mine === this.runsSeq) this.schedulePoll();
    }
  }

  async select(run, byUser = true) {
    if (byUser) this.state.autoSelected = false;
    if (byUser && this.sweepOn) {
      // sweep view: leaving it shows the run (already loaded when it is the selected one)
      this.leaveSweep();
      if (run === this.state.selected && this.state.analysis && this.state.analysis.run === run) {
        this.renderRun();
        return;
      }
    }
    if (run === this.state.selected && this.state.analysis && this.state.analysis.run === run) return;
    this.state.selected = run;
    this.state.zoom = null;
    this.state.focus = null;
    this.renderRunList();
    const my = ++this.seq;
    this.setLoading(true);
    try {
      await this.loadRun(run, my);
    } catch (e) {
      if (my === this.seq) {
        this.state.fetchError = e instanceof ApiError ? e.message : String(e);
        this.renderBanners();
      }
    } finally {
      if (my === this.seq) {
        this.setLoading(false);
        this.markReady();
      }
    }
  }

  async loadRun(run, my) {
    let analysis;
    try {
      analysis = await this.api.analysis(run);
    } catch (e) {
      if (my !== this.seq) return;
      this.state.analysis = null;
      this.state.analysisText = null;
      this.destroyCharts();
      clear(this.view);
      this.state.fetchError = `Could not analyse run: ${e instanceof ApiError ? e.message : String(e)}`;
      this.renderBanners();
      return;
    }
    if (my !== this.seq || run !== this.state.selected) return;
    this.state.fetchError = null;
    const text = JSON.stringify(analysis);
    const same = this.state.analysisText === text;
    const sameRun = this.state.analysis && this.state.analysis.run === run;
    this.state.analysis = analysis;
    this.state.analysisText = text;
    this.renderBanners();
    if (same) return; // a reload that changed nothing keeps zoom, focus and charts as they are
    if (!sameRun) {
      this.state.zoom = null;
      this.state.focus = null;
    }
    this.renderRun(sameRun);
    this.ensureRules();
  }

  async ensureRules() {
    if (this.rules) return;
    this.rules = {};
    try {
      const payload = await this.api.rules();
      for (const r of payload.rules || []) this.rules[r.code] = r;
      // Re-render the findings table so codes get their descriptions.
      if (this.state.analysis && this.findingsEl) {
        const fresh = this.makeFindings();
        this.findingsEl.replaceWith(fresh);
        this.findingsEl = fresh;
        this.highlightFocus();
      }
    } catch (e) {
      // Descriptions are optional; the table works without them.
    }
  }

  // ---- rendering ------------------------------------------------------------------------------

  renderRunList() {
    const {runs: matched, error} = filterRuns(this.state.runs, this.state.filter);
    const runs = this.sweepFilter ? matched.filter((r) => this.sweepFilter.has(r.run)) : matched; // sweep view
    this.filterError.textContent = error || '';
    this.filterInput.classList.toggle('cs-invalid', Boolean(error));
    const hadFocus = this.runList.contains(document.activeElement);
    clear(this.runList);
    for (const r of runs) {
      const item = runListItem(r, {selected: r.run === this.state.selected, onSelect: (name) => this.select(name)});
      this.runList.appendChild(item);
      if (hadFocus && r.run === this.state.selected) item.focus();
    }
    const total = this.state.runs.length;
    const sick = this.state.runs.filter((r) => r.health === 'critical' || r.health === 'warning').length;
    const waiting = this.state.runs.filter((r) => r.health === 'pending').length;
    let count = `${plural(total, 'run')} · ${sick} sick${waiting ? ` · ${waiting} not analysed yet` : ''}`;
    if (runs.length !== total && !error) count = `${runs.length} of ${count}`;
    this.runCount.textContent = total ? count : '';
    this.renderProgress();
    if (total && !runs.length) this.runList.appendChild(el('li', {class: 'cs-runs-empty', text: 'No run matches the filter.'}));
  }

  /** "Analysing at full resolution: 120 of 1000 runs done" and a bar, while runs are pending. */
  renderProgress() {
    clear(this.progressLine);
    const p = this.state.progress;
    const text = progressText(p);
    if (!text) return;
    const pct = p.total ? Math.round((100 * p.analysed) / p.total) : 0;
    this.progressLine.appendChild(el('span', {class: 'cs-progress-text', text: `${text}…`}));
    this.progressLine.appendChild(
      el('div', {class: 'cs-progress-bar', attrs: {'aria-hidden': 'true'}}, [el('span', {style: {width: `${pct}%`}})]),
    );
  }

  // ---- sweep view (sweep.js) ----------------------------------------------------------------

  toggleSweep() {
    if (this.sweepOn) {
      this.leaveSweep();
      if (this.state.analysis) this.renderRun();
      return;
    }
    this.sweepOn = true;
    this.sweepButton.classList.add('cs-on');
    this.sweepButton.setAttribute('aria-pressed', 'true');
    this.destroyCharts();
    clear(this.view);
    this.view.appendChild(this.sweep.root);
    this.sweep.refresh();
  }

  leaveSweep() {
    this.sweepOn = false;
    this.sweepButton.classList.remove('cs-on');
    this.sweepButton.setAttribute('aria-pressed', 'false');
    if (this.sweep.root.parentNode) this.sweep.root.parentNode.removeChild(this.sweep.root);
  }

  setSweepFilter(runs, label) {
    this.sweepFilter = runs;
    clear(this.sweepFilterLine);
    if (runs) {
      this.sweepFilterLine.appendChild(el('span', {text: `only: ${label}`, title: label}));
      this.sweepFilterLine.appendChild(el('button', {
        class: 'cs-button', text: 'clear', attrs: {type: 'button', 'data-sweep-clear': '1'},
        on: {click: () => {
          this.setSweepFilter(null, null);
          this.sweep.clearFilter();
        }},
      }));
    }
    this.renderRunList();
  }

  // ---- end sweep view ----------------------------------------------------------------------

  renderBanners() {
    clear(this.banners);
    if (this.state.configError) {
      this.banners.appendChild(banner('error', `Configuration error: ${this.state.configError}`));
    }
    if (this.state.storageError) {
      this.banners.appendChild(banner('error', `Cannot read the logdir's event files: ${this.state.storageError}`));
    }
    if (this.state.fetchError) this.banners.appendChild(banner('error', this.state.fetchError));
    const a = this.state.analysis;
    const problems = [...(this.state.problems || [])];
    if (a && Array.isArray(a.problems)) for (const p of a.problems) if (!problems.includes(String(p))) problems.push(String(p));
    if (problems.length) {
      const details = el('details', {class: 'cs-problems'}, [
        el('summary', {text: 'details'}),
        el('ul', {}, problems.slice(0, 50).map((p) => el('li', {text: p}))),
        problems.length > 50 ? el('div', {class: 'cs-muted', text: `… and ${problems.length - 50} more`}) : null,
      ]);
      const n = problems.length;
      this.banners.appendChild(banner('info', `${n} problem${n === 1 ? '' : 's'} reading the logs (the analysis skipped what it could not read).`, details));
    }
    const selected = a && a.run === this.state.selected;
    for (const note of selected ? [lossKindNote(a), lateStartNote(a), valByWallTimeNote(a), perplexityNote(a)] : []) {
      if (note) this.banners.appendChild(banner('info', note));
    }
    if (a && a.sampled && a.run === this.state.selected) {
      this.banners.appendChild(
        banner(
          'info',
          'Analysed TensorBoard’s sample, not every step: short spikes may be missing. Run `tb-crash-signals scan LOGDIR` for a full-resolution analysis.',
        ),
      );
    }
  }

  renderNoRuns() {
    this.destroyCharts();
    this.state.analysis = null;
    this.state.analysisText = null;
    clear(this.view);
    this.view.appendChild(
      el('div', {class: 'cs-card cs-empty'}, [
        el('h3', {class: 'cs-card-title', text: 'No runs'}),
        el('p', {
          text: 'No run with scalar data was found in the logdir. Crash Signals analyses the scalars TensorBoard loads (loss, gradient norm, learning rate, update ratio); runs appear here as their event files are written.',
        }),
      ]),
    );
  }

  destroyCharts() {
    if (this.group) this.group.destroy();
    this.group = null;
    this.resizeObserver.disconnect();
  }

  renderRun(keepScroll = false) {
    if (this.sweepOn) return; // sweep view: the run is shown when it is left
    const a = this.state.analysis;
    // A pending list entry is older than the analysis just fetched: show the analysis alone.
    const listed = this.state.runs.find((r) => r.run === a.run);
    const entry = listed && !isPending(listed) ? listed : {};
    const scroller = this.view.parentElement;
    const scrollTop = keepScroll ? scroller.scrollTop : 0;
    this.destroyCharts();
    clear(this.view);
    requestAnimationFrame(() => {
      scroller.scrollTop = scrollTop;
    });
    this.view.appendChild(runHeader(a, entry, this.runLink()));
    if (a.error) {
      this.view.appendChild(
        el('section', {class: 'cs-card cs-failed'}, [
          el('h3', {class: 'cs-card-title', text: 'Analysis failed'}),
          el('pre', {class: 'cs-snippet', text: String(a.error)}),
        ]),
      );
      this.findingsEl = null;
      return;
    }
    if (a.health === 'no_signals' || !presentCharts(a).length) {
      this.view.appendChild(noSignalsView(a));
      this.findingsEl = null;
      return;
    }
    this.view.appendChild(this.makeControls());
    this.chartsEl = el('div', {class: 'cs-charts'});
    this.view.appendChild(this.chartsEl);
    this.findingsEl = this.makeFindings();
    this.view.appendChild(this.findingsEl);
    this.buildCharts();
    this.highlightFocus();
    if (this.pendingOpen === a.run) requestAnimationFrame(() => this.openFirstIncident());
  }

  makeControls() {
    const value = el('span', {class: 'cs-smoothing-value', text: this.state.smoothing.toFixed(2)});
    const slider = el('input', {
      class: 'cs-smoothing',
      attrs: {type: 'range', min: '0', max: '0.99', step: '0.01', value: String(this.state.smoothing), 'aria-label': 'Smoothing'},
      on: {
        input: () => {
          this.state.smoothing = Number(slider.value);
          value.textContent = this.state.smoothing.toFixed(2);
          this.updateSmoothing();
        },
      },
    });
    const crashed = crashStepOf(this.state.analysis) !== null;
    const full = el('button', {
      class: `cs-button cs-full-range${this.state.fullRange ? ' cs-on' : ''}`,
      text: 'Full range',
      title: 'y axes: the whole range, or the steps before the crash (what lies beyond is marked at the edge)',
      attrs: {type: 'button', 'aria-pressed': this.state.fullRange ? 'true' : 'false', 'data-full-range': '1'},
      on: {
        click: () => {
          this.state.fullRange = !this.state.fullRange;
          full.classList.toggle('cs-on', this.state.fullRange);
          full.setAttribute('aria-pressed', this.state.fullRange ? 'true' : 'false');
          this.rebuildCharts();
        },
      },
    });
    return el('div', {class: 'cs-controls'}, [
      el('label', {class: 'cs-control'}, [el('span', {class: 'cs-control-label', text: 'Smoothing'}), slider, value]),
      el('button', {class: 'cs-button', text: 'Reset zoom', attrs: {type: 'button'}, on: {click: () => this.resetZoom()}}),
      crashed ? full : null,
      el('span', {class: 'cs-hint', text: 'drag on a chart to zoom · double-click to reset · markers stay on raw steps'}),
      el('span', {class: 'cs-legend-key'}, [
        el('span', {class: 'cs-key cs-key-warning', text: '▲'}),
        ' warning ',
        el('span', {class: 'cs-key cs-key-critical', text: '◆'}),
        ' critical ',
        el('span', {class: 'cs-key cs-key-nonfinite', text: '✕'}),
        ' non-finite',
      ]),
    ]);
  }

  makeFindings() {
    const a = this.state.analysis;
    return findingsTable(a, {
      rules: this.rules,
      onZoom: (i) => this.zoomTo(i),
      onZoomIncident: (k) => this.zoomToIncident(k),
      onReset: () => this.resetZoom(),
      linkFor: (inc) => {
        const refs = signalRefs(a, incidentSignals(a, inc));
        if (!refs.length) return null;
        return timeSeriesLink(
          timeSeriesHref(refs, {pinned: refs.map((r) => r.tag)}),
          `TensorBoard's Time Series: ${refs.map((r) => `${r.run} · ${r.tag}`).join(', ')}`,
        );
      },
    });
  }

  runLink() {
    const refs = signalRefs(this.state.analysis);
    if (!refs.length) return null;
    return timeSeriesLink(timeSeriesHref(refs), `TensorBoard's Time Series, filtered to this run's signal tags`);
  }

  chartLog(spec, a) {
    const vals = spec.signals.filter((s) => a.series[s]).map((s) => a.series[s].values);
    const possible = canLog(vals);
    const want = spec.id in this.state.log ? this.state.log[spec.id] : spec.log || (spec.id === 'loss' && wideRange(vals));
    return {possible, log: possible && want};
  }

  buildCharts() {
    const a = this.state.analysis;
    const charts = presentCharts(a);
    const extent = stepExtent(a);
    this.extent = extent;
    this.group = new ChartGroup();
    this.group.onChange = (min, max) => {
      const full = min <= extent.min && max >= extent.max;
      this.state.zoom = full ? null : {min, max};
      this.markRange(min, max);
    };
    this.plotEls = new Map();
    for (const spec of charts) {
      const {possible, log} = this.chartLog(spec, a);
      const chips = this.chartChips(spec, a);
      const toggle = el('button', {
        class: `cs-toggle${log ? ' cs-on' : ''}`,
        text: log ? 'log' : 'linear',
        title: possible ? 'toggle log / linear y axis' : 'log scale needs positive values',
        attrs: {type: 'button', disabled: !possible, 'aria-pressed': log ? 'true' : 'false', 'data-log-toggle': spec.id},
        on: {
          click: () => {
            this.state.log[spec.id] = !log;
            this.rebuildCharts();
          },
        },
      });
      const plot = el('div', {class: 'cs-plot'});
      const card = el('section', {class: 'cs-card cs-chart', attrs: {'data-chart': spec.id}}, [
        el('div', {class: 'cs-card-head'}, [el('span', {class: 'cs-card-title', text: spec.title}), ...chips, el('span', {class: 'cs-spacer'}), toggle]),
        plot,
      ]);
      this.chartsEl.appendChild(card);
      const width = Math.max(plot.clientWidth, 240);
      const u = makeChart(plot, spec, {
        analysis: a,
        charts,
        extent,
        smoothing: this.state.smoothing,
        log,
        width,
        height: CHART_HEIGHT,
        syncKey: `cs-${a.run}`,
        group: this.group,
        theme: this.state.theme,
        crashStep: crashStepOf(a),
        fullRange: this.state.fullRange,
        onSelectIncident: (k) => this.zoomToIncident(k),
      });
      u._csLog = log;
      if (u._csPeak) {
        const head = card.querySelector('.cs-card-head');
        head.insertBefore(
          el('span', {
            class: 'cs-chip cs-chip-clip',
            text: `↑ peak ${fmtNum(u._csPeak.value)} at step ${fmtStep(u._csPeak.step)}`,
            title: 'beyond this y range, which fits the steps before the crash; "Full range" shows everything',
            attrs: {'data-clip-peak': String(u._csPeak.value)},
          }),
          head.querySelector('.cs-spacer'),
        );
      }
      this.group.add(u);
      this.plotEls.set(u, plot);
    }
    if (this.state.zoom) this.group.setX(this.state.zoom.min, this.state.zoom.max);
    const r = this.state.zoom || extent;
    this.markRange(r.min, r.max);
    this.resizeObserver.observe(this.chartsEl);
  }

  chartChips(spec, a) {
    const chips = [];
    if (spec.id === 'loss' && a.gap_band && a.gap_band.steps && a.gap_band.steps.length) {
      chips.push(
        el('span', {
          class: 'cs-chip cs-chip-gap',
          attrs: {'data-gap-band': '1'},
          title: 'shaded where validation loss is above train loss',
          text: 'val–train gap',
        }),
      );
    }
    const t = (a.thresholds || {})[spec.signals[0]];
    if (t !== null && t !== undefined) chips.push(el('span', {class: 'cs-chip cs-chip-threshold', text: `threshold ${fmtNum(t)}`}));
    const b = (a.bands || {})[spec.signals[0]];
    if (Array.isArray(b) && b.length === 2) {
      const [lo, hi] = b;
      const text = lo != null && hi != null ? `${fmtNum(lo)}–${fmtNum(hi)}` : lo != null ? `≥ ${fmtNum(lo)}` : hi != null ? `≤ ${fmtNum(hi)}` : null;
      if (text) chips.push(el('span', {class: 'cs-chip cs-chip-band', text: `healthy ${text}`}));
    }
    const fits = (a.fits || []).filter((f) => spec.signals.includes(f.signal));
    if (fits.length) {
      // every growth on this chart came back: the chip in the warning colour, as their lines
      const back = fits.every(cameBack);
      chips.push(el('span', {class: `cs-chip cs-chip-fit${back ? ' cs-chip-fit-back' : ''}`,
        text: back ? 'growth fit · came back' : 'growth fit'}));
    }
    let nonfinite = 0;
    for (const s of spec.signals) nonfinite += ((a.nonfinite || {})[s] || []).length;
    if (nonfinite) chips.push(el('span', {class: 'cs-chip cs-chip-nonfinite', text: `${nonfinite} non-finite`}));
    return chips;
  }

  rebuildCharts() {
    this.destroyCharts();
    clear(this.chartsEl);
    this.buildCharts();
    this.highlightFocus();
  }

  updateSmoothing() {
    if (!this.group) return;
    for (const u of this.group.charts) {
      updateChartData(u, this.state.analysis, u._csSpec, {smoothing: this.state.smoothing, log: u._csLog, extent: this.extent});
    }
  }

  onResize() {
    if (!this.group) return;
    cancelAnimationFrame(this.resizeFrame);
    this.resizeFrame = requestAnimationFrame(() => {
      if (!this.group) return;
      for (const u of this.group.charts) {
        const w = Math.max(this.plotEls.get(u).clientWidth, 240);
        if (Math.abs(w - u.width) > 1) u.setSize({width: w, height: CHART_HEIGHT});
      }
    });
  }

  zoomToIncident(k) {
    const inc = (this.state.analysis.incidents || [])[k];
    if (!inc || !this.group) return;
    const r = zoomRange(inc.open ? {...inc, end_step: Math.max(inc.end_step ?? inc.start_step, this.extent.max)} : inc, this.extent);
    this.state.zoom = r;
    this.state.focus = `i${k}`;
    this.group.setX(r.min, r.max);
    this.markRange(r.min, r.max);
    this.highlightFocus();
  }

  zoomTo(index) {
    const ep = (this.state.analysis.episodes || [])[index];
    if (!ep || !this.group) return;
    const r = zoomRange(ep, this.extent);
    this.state.zoom = r;
    this.state.focus = `e${index}`;
    this.group.setX(r.min, r.max);
    this.markRange(r.min, r.max);
    this.highlightFocus();
  }

  /** Test hook: the x range (steps) every chart shows, on the charts container. */
  markRange(min, max) {
    if (!this.chartsEl) return;
    this.chartsEl.setAttribute('data-x-min', String(Math.round(min)));
    this.chartsEl.setAttribute('data-x-max', String(Math.round(max)));
  }

  resetZoom() {
    this.state.zoom = null;
    this.state.focus = null;
    if (this.group) {
      this.group.setX(this.extent.min, this.extent.max);
      this.markRange(this.extent.min, this.extent.max);
    }
    this.highlightFocus();
  }

  highlightFocus() {
    const f = this.state.focus;
    for (const node of this.view.querySelectorAll('[data-finding]')) {
      node.classList.toggle('cs-focus', f === `e${node.getAttribute('data-finding')}`);
    }
    const eps = (this.state.analysis && this.state.analysis.episodes) || [];
    const k = f && f[0] === 'i' ? f.slice(1) : f && f[0] === 'e' ? String(eps[Number(f.slice(1))]?.incident ?? '') : null;
    for (const node of this.view.querySelectorAll('[data-incident]')) {
      node.classList.toggle('cs-focus', k !== null && node.getAttribute('data-incident') === k);
    }
  }
}

let app = null;

/** Entry point: TensorBoard calls render() with no arguments once the module is imported. */
export async function render() {
  if (app) return;
  document.documentElement.classList.add('cs-root');
  const root = el('div', {class: 'cs-mount'});
  document.body.appendChild(root);
  const theme = watchTheme((t) => (app ? app.setTheme(t) : applyTheme(t)));
  applyTheme(theme.theme);
  await loadStylesheet();
  app = new App(root);
  app.state.theme = document.documentElement.getAttribute('data-theme');
  connectToHost({onReload: () => app.refresh()});
  await app.refresh();
}
