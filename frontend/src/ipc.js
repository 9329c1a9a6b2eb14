// Guest side of TensorBoard's plugin iframe protocol (tensorboard/components/experimental/
// plugin_util: plugin-guest.ts, message.ts), in plain JS with no TensorBoard dependency.
//
// Handshake: the guest creates a MessageChannel and posts the string "experimental.bootstrap" to
// window.parent, transferring port2. Afterwards both sides exchange JSON strings over the port:
//   {"type": T, "id": N, "payload": P, "error": null, "isReply": false}
// and every non-reply is answered with {"type": T, "id": N, "payload": ..., "error": ...,
// "isReply": true} (the host awaits a reply per frame). The host broadcasts
// "experimental.DataReloaded" (payload undefined) whenever TensorBoard's last-loaded time changes:
// the reload button, auto-reload, and once after the first load.

export const BOOTSTRAP = 'experimental.bootstrap';
export const DATA_RELOADED = 'experimental.DataReloaded';

/**
 * Connects to the host frame and calls `onReload()` on each DataReloaded. Returns a disconnect
 * function. Does nothing (returns a no-op) outside an iframe.
 */
export function connectToHost({onReload, win = globalThis.window, Channel = globalThis.MessageChannel}) {
  if (!win || !win.parent || win.parent === win || !Channel) return () => {};
  const channel = new Channel();
  const port = channel.port1;
  port.onmessage = (event) => {
    let msg;
    try {
      msg = JSON.parse(event.data);
    } catch (e) {
      return;
    }
    if (!msg || typeof msg !== 'object' || msg.isReply) return;
    port.postMessage(
      JSON.stringify({type: msg.type, id: msg.id, payload: null, error: null, isReply: true}),
    );
    if (msg.type === DATA_RELOADED) onReload();
  };
  try {
    win.parent.postMessage(BOOTSTRAP, '*', [channel.port2]);
  } catch (e) {
    port.close();
    return () => {};
  }
  return () => port.close();
}
