import test from 'node:test';
import assert from 'node:assert/strict';

import {watchTheme} from '../src/theme.js';

class FakeClassList {
  constructor() { this.set = new Set(); }
  contains(c) { return this.set.has(c); }
}

function fakeWindow({parentBody = null, throwOnParent = false, prefersDark = false} = {}) {
  const observers = [];
  const media = {matches: prefersDark, listeners: [], addEventListener(_, f) { this.listeners.push(f); }, removeEventListener() {}};
  const win = {
    matchMedia: () => media,
    MutationObserver: class {
      constructor(cb) { this.cb = cb; observers.push(this); }
      observe(target) { this.target = target; }
      disconnect() { this.gone = true; }
    },
  };
  if (throwOnParent) {
    win.parent = {get document() { throw new Error('SecurityError'); }};
  } else if (parentBody) {
    win.parent = {document: {body: parentBody}};
  } else {
    win.parent = win;
  }
  return {win, media, observers};
}

test('follows the parent TensorBoard body.dark-mode, live', () => {
  const body = {classList: new FakeClassList()};
  const {win, observers} = fakeWindow({parentBody: body, prefersDark: true});
  const seen = [];
  const w = watchTheme((t) => seen.push(t), win);
  assert.equal(w.theme, 'light'); // the parent says light, whatever the browser prefers
  body.classList.set.add('dark-mode');
  observers[0].cb();
  body.classList.set.delete('dark-mode');
  observers[0].cb();
  observers[0].cb(); // no change, no call
  assert.deepEqual(seen, ['dark', 'light']);
  w.stop();
  assert.ok(observers[0].gone);
});

test('falls back to prefers-color-scheme when the parent cannot be read', () => {
  for (const opts of [{throwOnParent: true}, {}]) {
    const {win, media} = fakeWindow({...opts, prefersDark: true});
    const seen = [];
    const w = watchTheme((t) => seen.push(t), win);
    assert.equal(w.theme, 'dark');
    media.matches = false;
    media.listeners.forEach((f) => f());
    assert.deepEqual(seen, ['light']);
  }
});
