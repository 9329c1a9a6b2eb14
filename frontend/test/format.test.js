import {test} from 'node:test';
import assert from 'node:assert/strict';
import {toNum, fmtNum, fmtStep, fmtSpan, fmtStepAxis, fmtTick, fmtTicks, fmtAxis, plural} from '../src/format.js';

test('toNum', () => {
  assert.equal(toNum(1.5), 1.5);
  for (const v of [null, undefined, 'NaN', 'Infinity', NaN, Infinity, {}, '3']) assert.equal(toNum(v), null);
});

test('fmtNum', () => {
  assert.equal(fmtNum(0), '0');
  assert.equal(fmtNum(812.5), '812.5');
  assert.equal(fmtNum(100), '100');
  assert.equal(fmtNum(0.12345), '0.1235');
  assert.equal(fmtNum(1e-5), '1e-5');
  assert.equal(fmtNum(2.5e-4), '2.5e-4');
  assert.equal(fmtNum(123456), '1.23e5');
  assert.equal(fmtNum(null), '–');
  assert.equal(fmtNum('NaN'), 'NaN');
});

test('fmtStep and fmtSpan', () => {
  assert.equal(fmtStep(4120), '4120');
  assert.equal(fmtStep(12400), '12,400');
  assert.equal(fmtStep(1200000), '1,200,000');
  assert.equal(fmtStep(null), '–');
  assert.equal(fmtSpan(4120, 4188), '4120–4188');
  assert.equal(fmtSpan(4120, 4120), '4120');
  assert.equal(fmtSpan(4120, 4188, true), '4120–…');
});

test('axis labels', () => {
  assert.equal(fmtStepAxis(950), '950');
  assert.equal(fmtStepAxis(12500), '12.5k');
  assert.equal(fmtStepAxis(1200000), '1.2M');
  assert.equal(fmtStepAxis(null), null);
  assert.equal(fmtTick(0.0021, 0.0001), '0.0021');
  assert.equal(fmtTick(0.002, 0.0001), '0.0020');
  assert.equal(fmtTick(1.5, 0.5), '1.5');
  assert.equal(fmtTick(2, 1), '2');
  assert.equal(fmtTick(5e-4, 5e-4), '5e-4');
  assert.equal(fmtTick(null, 1), null);
  assert.equal(fmtAxis(null), null);
  assert.equal(fmtAxis(1e-5), '1e-5');
});

test('plural', () => {
  assert.equal(plural(1, 'warning'), '1 warning');
  assert.equal(plural(3, 'warning'), '3 warnings');
});

test('fmtTicks: one notation per axis', () => {
  assert.deepEqual(fmtTicks([0, 5e-4, 0.001, 0.0015, 0.002], 5e-4), ['0', '0.0005', '0.0010', '0.0015', '0.0020']);
  assert.deepEqual(fmtTicks([0, 1, 2], 1), ['0', '1', '2']);
  assert.deepEqual(fmtTicks([0, 0.5, 1, 1.5], 0.5), ['0', '0.5', '1.0', '1.5']);
  assert.deepEqual(fmtTicks([0, 2e22, 5e22], 2.5e22), ['0', '2e22', '5e22']);
  assert.deepEqual(fmtTicks([1e-5, 2e-5, null], 1e-5), ['1e-5', '2e-5', null]);
});
