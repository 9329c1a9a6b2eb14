import test from 'node:test';
import assert from 'node:assert/strict';

import {compareCells, fmtValue, sweepRows} from '../src/sweepmodel.js';

test('fmtValue prefers the server text (1.0 stays 1.0)', () => {
  assert.equal(fmtValue(1, '1.0'), '1.0');
  assert.equal(fmtValue(true), 'True');
  assert.equal(fmtValue(undefined), '');
  assert.equal(fmtValue('<img src=x>'), '<img src=x>');
});

test('compareCells: numbers numerically, missing last', () => {
  assert.ok(compareCells(0.001, 0.1) < 0);
  assert.ok(compareCells('lr10', 'lr9') > 0);
  assert.ok(compareCells(undefined, 1) > 0);
  assert.equal(compareCells(null, undefined), 0);
});

test('sweepRows sorts by health first, then by a column, ties by run', () => {
  const sweep = {runs: ['a', 'b', 'c', 'd']};
  const runs = new Map([
    ['a', {health: 'ok', hparams: {values: {lr: 0.1}}}],
    ['b', {health: 'critical', hparams: {values: {lr: 1.0}}}],
    ['c', {health: 'warning', hparams: {values: {lr: 0.01, __proto__x: 1}}}],
    ['d', {health: 'ok', hparams: null}],
  ]);
  assert.deepEqual(sweepRows(sweep, runs, null).map((r) => r.run), ['b', 'c', 'a', 'd']);
  assert.deepEqual(sweepRows(sweep, runs, {key: 'lr', dir: 'asc'}).map((r) => r.run), ['c', 'a', 'b', 'd']);
  assert.deepEqual(sweepRows(sweep, runs, {key: 'lr', dir: 'desc'}).map((r) => r.run), ['b', 'a', 'c', 'd']);
});

test('sweepRows keeps hostile keys as plain Map entries', () => {
  const values = JSON.parse('{"__proto__": 5, "constructor": "x"}');
  const rows = sweepRows({runs: ['r']}, new Map([['r', {health: 'ok', hparams: {values}}]]), null);
  assert.equal(rows[0].values.get('__proto__'), 5);
  assert.equal(rows[0].values.get('constructor'), 'x');
  assert.equal({}.polluted, undefined);
});
