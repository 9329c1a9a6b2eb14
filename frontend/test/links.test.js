import test from 'node:test';
import assert from 'node:assert/strict';

import {exactRegex, incidentSignals, signalRefs, timeSeriesHref} from '../src/links.js';

const A = {
  signals: {
    train_loss: {run: 'fit1/train', tag: 'epoch_loss'},
    val_loss: {run: 'fit1/validation', tag: 'epoch_loss'},
    grad_norm: null,
    lr: {run: 'lr=1e-3 (a|b)', tag: 'optim/lr'},
  },
  episodes: [{signal: 'val_loss'}, {signal: 'train_loss'}],
};

test('exactRegex escapes names and matches only them', () => {
  const re = new RegExp(exactRegex(['lr=1e-3 (a|b)', 'x.y']));
  assert.ok(re.test('lr=1e-3 (a|b)') && re.test('x.y'));
  assert.ok(!re.test('xzy') && !re.test('lr=1e-3 (a|b)/more') && !re.test('a'));
  assert.equal(exactRegex(['a', 'a']), '^a$');
  assert.equal(exactRegex([]), '');
});

test('timeSeriesHref: relative, filtered, pinned, no smoothing', () => {
  const refs = signalRefs(A, ['train_loss', 'val_loss']);
  const href = timeSeriesHref(refs, {pinned: refs.map((r) => r.tag)});
  assert.ok(href.startsWith('../../../?') && href.endsWith('#timeseries'));
  const q = new URL(href, 'http://h/pfx/data/plugin/crash_signals/');
  assert.equal(q.pathname, '/pfx/');
  assert.equal(q.searchParams.get('runFilter'), '^(?:fit1\\/train|fit1\\/validation)$');
  assert.equal(q.searchParams.get('tagFilter'), '^epoch_loss$');
  assert.deepEqual(JSON.parse(q.searchParams.get('pinnedCards')), [{plugin: 'scalars', tag: 'epoch_loss'}]);
  assert.equal(q.searchParams.get('smoothing'), null);
  assert.equal(signalRefs(A).length, 3); // null refs skipped
});

test('incidentSignals: the incident and its episodes', () => {
  assert.deepEqual(incidentSignals(A, {signal: 'train_loss', episodes: [0, 1, 7]}), ['train_loss', 'val_loss']);
});
