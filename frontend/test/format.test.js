import {test} from 'node:test';
import assert from 'node:assert/strict';
import {toNum, fmtNum, fmtStep, fmtSpan, fmtStepAxis, fmtTick, fmtTicks, fmtAxis, fmtLog, logSplits, plural, runNameParts, runNameSpans, stepDecimals} from '../src/format.js';

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
  assert.equal(fmtSpan(1137, 1199, true), 'from 1137, ongoing');
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

test('linear ticks carry the decimals of their step', () => {
  assert.equal(stepDecimals(0.25), 2);
  assert.equal(stepDecimals(0.00025), 5);
  assert.equal(stepDecimals(2), 0);
  assert.equal(stepDecimals(0.1 + 0.2), 1);
  // a learning-rate axis in 0.25 steps, and lightning/plateau's 0.00025 steps
  assert.deepEqual(fmtTicks([0, 0.25, 0.5, 0.75, 1], 0.25), ['0', '0.25', '0.50', '0.75', '1.00']);
  assert.deepEqual(fmtTicks([0.00025, 0.0005, 0.00075], 0.00025), ['2.5e-4', '5e-4', '7.5e-4']);
  assert.deepEqual(fmtTicks([0.0005, 0.00075, 0.001], 0.00025), ['0.00050', '0.00075', '0.00100']);
  assert.deepEqual(fmtTicks([0, 2.5e22, 5e22, 7.5e22], 2.5e22), ['0', '2.5e22', '5e22', '7.5e22']);
  assert.equal(fmtTick(0.3, 0.1), '0.3');
  for (const inc of [0.25, 0.00025, 0.2, 5e-7, 2.5e30]) {
    const ticks = [1, 2, 3, 4].map((i) => i * inc);
    const labels = fmtTicks(ticks, inc);
    assert.equal(new Set(labels).size, labels.length, `distinct labels for step ${inc}: ${labels}`);
    labels.forEach((l, i) => assert.ok(Math.abs(Number(l) - ticks[i]) <= 1e-9 * ticks[i], `${l} != ${ticks[i]}`));
  }
});

test('log axes label every range from 1e-12 to 1e38 with at least two ticks', () => {
  assert.deepEqual([1e-12, 1e-6, 0.001, 1, 1000, 1e6, 1e36].map(fmtLog), ['1e-12', '1e-6', '0.001', '1', '1000', '1e6', '1e36']);
  assert.deepEqual(logSplits(1e25, 3e36, 6), [1e26, 1e28, 1e30, 1e32, 1e34, 1e36]);
  assert.deepEqual(logSplits(0.5, 20, 6), [1, 10]);
  assert.deepEqual(logSplits(0.3, 0.9, 6), [0.335, 0.52, 0.806]);
  assert.deepEqual(logSplits(0.15, 0.6, 6), [0.2, 0.5]);
  for (let lo = -12; lo <= 37; lo += 1) {
    for (const width of [0.2, 1, 3, 10, 50]) {
      const min = 1.3 * 10 ** lo;
      const max = Math.min(min * 10 ** width, 1e38);
      if (!(max > min)) continue;
      const splits = logSplits(min, max, 6);
      assert.ok(splits.length >= 2 && splits.length <= 8, `${min}..${max}: ${splits}`);
      for (const v of splits) assert.ok(v >= min * 0.999 && v <= max * 1.001, `${v} outside ${min}..${max}`);
      const labels = splits.map(fmtLog);
      assert.equal(new Set(labels).size, labels.length, `${min}..${max}: ${labels}`);
      for (const l of labels) assert.ok(l.length <= 8, l);
    }
  }
});

test('runNameParts keeps the end of a run name apart: its last segments while short, a long one\'s end', () => {
  assert.deepEqual(runNameParts('sweep/logs/search/learning_rate=1.0_optimizer=Adam'),
    ['sweep/logs/search/', 'learning_rate=1.0_optim', 'izer=Adam']);
  assert.deepEqual(runNameParts('hw/Homework04/logs/SUB_1/RMSprop'), ['hw/Homework04/logs/', 'SUB_1/RMSprop', '']);
  assert.deepEqual(runNameParts('lora/runs/run0'), ['lora/', 'runs/run0', '']);
  assert.deepEqual(runNameParts('custom/healthy'), ['custom/', 'healthy', '']);
  assert.deepEqual(runNameParts('.'), ['', '.', '']);
  assert.deepEqual(runNameParts('a/b/'), ['a/', 'b/', '']);
  assert.deepEqual(runNameParts('/abs/p'), ['', '/abs/p', '']);
  for (const name of ['x/y/z/a_long_enough_name', 'one', 'a//b', 'k/' + 'z'.repeat(40), '']) {
    assert.equal(runNameParts(name).join(''), name);
  }
});

test('runNameSpans: a sweep\'s key=value names as keys and values, so that the list keeps the values in view', () => {
  assert.deepEqual(runNameSpans('sweep/search/learning_rate=0.001_optimizer=Adamax'), [
    ['sweep/search/', 'head'], ['learning_rate=', 'key'], ['0.001', 'value'], ['_optimizer=', 'key'], ['Adamax', 'value']]);
  // Separators between pairs, values with '-' and '.' and their own '_' (up to the next key).
  assert.deepEqual(runNameSpans('runs/lr=3e-4,bs=64'), [['runs/', 'head'], ['lr=', 'key'], ['3e-4', 'value'], [',bs=', 'key'], ['64', 'value']]);
  assert.deepEqual(runNameSpans('s/optimized_scheduler=Adadelta_plateau_scheduler=CyclicLR_x_~random=1').slice(1), [
    ['optimized_scheduler=', 'key'], ['Adadelta_plateau', 'value'], ['_scheduler=', 'key'], ['CyclicLR_x_', 'value'],
    ['~random=', 'key'], ['1', 'value']]);
  assert.deepEqual(runNameSpans('a=1b=2'), [['a=', 'key'], ['1b=', 'key'], ['2', 'value']]);
  // A snake_case key after a value is not told from a snake_case value: the value keeps the doubt
  // (shown whole), the key its last word.
  assert.deepEqual(runNameSpans('o=Adamax_batch_size=64'), [['o=', 'key'], ['Adamax_batch', 'value'], ['_size=', 'key'], ['64', 'value']]);
  // Names without '=' keep runNameParts' body and end.
  assert.deepEqual(runNameSpans('custom/healthy'), [['custom/', 'head'], ['healthy', 'body']]);
  assert.deepEqual(runNameSpans('k/' + 'z'.repeat(40)), [['k/', 'head'], ['z'.repeat(31), 'body'], ['z'.repeat(9), 'end']]);
  for (const name of ['x=', '=y', '==', 'a/b=/c=d', '<img src=x onerror="top.__xss=1;alert(1)">', '', '.']) {
    assert.equal(runNameSpans(name).map(([text]) => text).join(''), name);
  }
});
