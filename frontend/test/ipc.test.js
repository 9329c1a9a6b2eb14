import {test} from 'node:test';
import assert from 'node:assert/strict';
import {connectToHost, BOOTSTRAP, DATA_RELOADED} from '../src/ipc.js';

// A host like TensorBoard's plugin-host-ipc.ts: receives the bootstrap port, sends messages over it.
function fakeWindow() {
  const host = {posted: [], port: null};
  const parent = {
    postMessage(data, origin, transfer) {
      host.posted.push({data, origin});
      host.port = transfer[0];
    },
  };
  return {win: {parent}, host};
}

function nextMessage(port) {
  return new Promise((resolve) => {
    port.onmessage = (e) => resolve(JSON.parse(e.data));
  });
}

test('bootstrap handshake, DataReloaded calls onReload and is answered', async () => {
  const {win, host} = fakeWindow();
  let reloads = 0;
  const disconnect = connectToHost({onReload: () => (reloads += 1), win});
  assert.deepEqual(host.posted, [{data: BOOTSTRAP, origin: '*'}]);
  assert.ok(host.port);
  const reply = nextMessage(host.port);
  host.port.postMessage(JSON.stringify({type: DATA_RELOADED, id: 7, error: null, isReply: false}));
  assert.deepEqual(await reply, {type: DATA_RELOADED, id: 7, payload: null, error: null, isReply: true});
  assert.equal(reloads, 1);
  // other message types are answered but ignored
  const reply2 = nextMessage(host.port);
  host.port.postMessage(JSON.stringify({type: 'experimental.RunsChanged', id: 8, payload: ['a'], error: null, isReply: false}));
  assert.equal((await reply2).id, 8);
  assert.equal(reloads, 1);
  disconnect();
  host.port.close();
});

test('garbage and replies are ignored', async () => {
  const {win, host} = fakeWindow();
  let reloads = 0;
  const disconnect = connectToHost({onReload: () => (reloads += 1), win});
  host.port.postMessage('not json');
  host.port.postMessage(JSON.stringify({type: DATA_RELOADED, id: 1, isReply: true}));
  const reply = nextMessage(host.port);
  host.port.postMessage(JSON.stringify({type: DATA_RELOADED, id: 2, isReply: false}));
  assert.equal((await reply).id, 2);
  assert.equal(reloads, 1);
  disconnect();
  host.port.close();
});

test('outside an iframe: no-op', () => {
  const win = {};
  win.parent = win;
  const disconnect = connectToHost({onReload: () => {}, win});
  assert.equal(typeof disconnect, 'function');
  disconnect();
  assert.equal(typeof connectToHost({onReload: () => {}, win: undefined}), 'function');
});
