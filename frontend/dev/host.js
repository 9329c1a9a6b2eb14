// Dev host page: the TensorBoard side of the plugin IPC (plugin-host-ipc.ts), minimally.
(function () {
  const status = document.getElementById('ipc-status');
  const ports = [];
  let id = 0;
  let acks = 0;
  window.addEventListener('message', (event) => {
    if (event.data !== 'experimental.bootstrap' || !event.ports[0]) return;
    const port = event.ports[0];
    port.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      if (msg.isReply) {
        acks += 1;
        status.textContent = `connected · ${acks} reload${acks === 1 ? '' : 's'} acknowledged`;
        status.setAttribute('data-acks', String(acks));
      } else {
        port.postMessage(JSON.stringify({type: msg.type, id: msg.id, payload: null, error: null, isReply: true}));
      }
    };
    ports.push(port);
    status.textContent = 'connected';
    status.setAttribute('data-connected', '1');
  });
  document.getElementById('reload').addEventListener('click', () => {
    for (const port of ports) {
      port.postMessage(JSON.stringify({type: 'experimental.DataReloaded', id: id++, error: null, isReply: false}));
    }
  });
})();
