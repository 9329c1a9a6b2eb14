import {test} from 'node:test';
import assert from 'node:assert/strict';
import {makeApi, routeUrl, ApiError} from '../src/api.js';

test('routeUrl is relative and encodes run names', () => {
  assert.equal(routeUrl('runs'), './runs');
  assert.equal(routeUrl('analysis', {run: 'exp3/lr=3e-3'}), './analysis?run=exp3%2Flr%3D3e-3');
  assert.equal(routeUrl('analysis', {run: '<img src=x onerror=alert(1)>'}), './analysis?run=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E');
  assert.equal(routeUrl('analysis', {run: 'a&b#c'}), './analysis?run=a%26b%23c');
});

function fakeFetch(routes, calls = []) {
  return async (url) => {
    calls.push(url);
    const r = routes[url];
    if (r instanceof Error) throw r;
    const [status, body] = r || [404, 'not found'];
    return {
      ok: status === 200,
      status,
      text: async () => (typeof body === 'string' ? body : JSON.stringify(body)),
      json: async () => (typeof body === 'string' ? JSON.parse(body) : body),
    };
  };
}

test('makeApi: JSON on 200', async () => {
  const calls = [];
  const api = makeApi(fakeFetch({'./runs': [200, {schema: 1, runs: []}], './analysis?run=a%2Fb': [200, {run: 'a/b'}]}, calls));
  assert.deepEqual(await api.runs(), {schema: 1, runs: []});
  assert.deepEqual(await api.analysis('a/b'), {run: 'a/b'});
  assert.deepEqual(calls, ['./runs', './analysis?run=a%2Fb']);
});

test('makeApi: non-200 throws ApiError with the text/plain body', async () => {
  const api = makeApi(fakeFetch({'./analysis?run=x': [404, 'no such run: x\n'], './runs': [500, '']}));
  await assert.rejects(api.analysis('x'), (e) => e instanceof ApiError && e.message === 'no such run: x' && e.status === 404);
  await assert.rejects(api.runs(), (e) => e instanceof ApiError && e.message === 'HTTP 500');
});

test('makeApi: network failure and malformed JSON become ApiError', async () => {
  const api = makeApi(fakeFetch({'./runs': new TypeError('Failed to fetch'), './rules': [200, '{oops']}));
  await assert.rejects(api.runs(), (e) => e instanceof ApiError && /cannot reach/.test(e.message));
  await assert.rejects(api.rules(), (e) => e instanceof ApiError && /malformed/.test(e.message));
});
