// Dev server imitating how TensorBoard hosts the tab, over fixture payloads.
//
//   node dev/serve.mjs [--port 6007] [--host 127.0.0.1] [--delay 0]
//
// Every fixture set in dev/fixtures/<set>/ is served under its own path prefix, which also checks
// that the tab only uses relative URLs:
//   /<set>/                                   host page: an iframe + a "Reload" button that speaks
//                                             TensorBoard's plugin IPC (experimental.bootstrap,
//                                             experimental.DataReloaded)
//   /<set>/data/plugin_entry.html?name=crash_signals
//                                             byte-for-byte TensorBoard's iframe page, same CSP
//   /<set>/data/plugin/crash_signals/index.js, index.css   the built bundle (npm run build)
//   /<set>/data/plugin/crash_signals/runs, rules, analysis?run=R   fixture JSON
// The set "broken" answers /runs with a 500 text/plain body, like TensorBoard's error handler.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const staticDir = path.resolve(here, '..', '..', 'tb_crash_signals', 'tb_plugin', 'static');
const fixturesDir = path.join(here, 'fixtures');

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const port = Number(arg('port', process.env.PORT || 6007));
const host = arg('host', '127.0.0.1');
const delay = Number(arg('delay', 0));

const PLUGIN = 'crash_signals';
const ENTRY_SCRIPT = `import(${JSON.stringify('./index.js')}).then((m) => void m.render());`;
const ENTRY_HTML = `\n<!DOCTYPE html>\n<head><base href="plugin/${PLUGIN}/" /></head>\n<body><script type="module">${ENTRY_SCRIPT}</script></body>\n`;

function csp(hashes = []) {
  const scripts = ["'self'", "'unsafe-eval'", ...hashes.map((h) => `'sha256-${h}'`)].join(' ');
  return [
    "default-src 'self'",
    "font-src 'self' data:",
    "frame-src 'self'",
    "img-src 'self' data: blob:",
    "object-src 'none'",
    "style-src 'self' https://www.gstatic.com data: 'unsafe-inline'",
    "connect-src 'self'",
    `script-src ${scripts}`,
  ].join(';');
}

function send(res, code, type, body, headers = {}) {
  res.writeHead(code, {'Content-Type': type, 'Cache-Control': 'no-cache', 'X-Content-Type-Options': 'nosniff', ...headers});
  res.end(body);
}

const TYPES = {'.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.html': 'text/html; charset=utf-8'};

function serveFile(res, file) {
  fs.readFile(file, (err, buf) => {
    if (err) return send(res, 404, 'text/plain; charset=utf-8', `not found: ${path.basename(file)} (run npm run build)`);
    send(res, 200, TYPES[path.extname(file)] || 'application/octet-stream', buf);
  });
}

function loadSet(set) {
  const dir = path.join(fixturesDir, set);
  const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
  return {runs: read('runs.json'), rules: read('rules.json'), analysis: read('analysis.json')};
}

function sets() {
  return fs.readdirSync(fixturesDir).filter((d) => fs.existsSync(path.join(fixturesDir, d, 'runs.json')));
}

function hostPage(set) {
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Crash Signals (dev: ${set})</title>
<link rel="stylesheet" href="/dev-host.css"></head>
<body>
<header><span class="brand">TensorBoard</span><span class="tab">CRASH SIGNALS</span>
<span class="spacer"></span><span id="ipc-status">waiting for bootstrap</span>
<button id="reload" type="button" title="broadcast experimental.DataReloaded">⟳ Reload</button></header>
<iframe id="plugin" src="data/plugin_entry.html?name=${PLUGIN}"></iframe>
<script src="/dev-host.js"></script>
</body></html>`;
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, `http://${req.headers.host || 'localhost'}`);
  const parts = url.pathname.split('/').filter(Boolean);
  if (delay) await new Promise((r) => setTimeout(r, delay));
  if (url.pathname === '/') {
    const links = sets().concat('broken').map((s) => `<li><a href="/${s}/">${s}</a></li>`).join('');
    return send(res, 200, TYPES['.html'], `<!DOCTYPE html><title>Crash Signals dev</title><ul>${links}</ul>`, {'Content-Security-Policy': csp()});
  }
  if (url.pathname === '/favicon.ico') return send(res, 204, 'image/x-icon', '');
  if (url.pathname === '/dev-host.js') return serveFile(res, path.join(here, 'host.js'));
  if (url.pathname === '/dev-host.css') return serveFile(res, path.join(here, 'host.css'));
  const set = parts[0];
  const known = sets().includes(set) || set === 'broken';
  if (!known) return send(res, 404, 'text/plain; charset=utf-8', 'unknown fixture set');
  const rest = parts.slice(1).join('/');
  if (rest === '' ) {
    if (!url.pathname.endsWith('/')) return send(res, 301, 'text/plain', '', {Location: `/${set}/`});
    return send(res, 200, TYPES['.html'], hostPage(set), {'Content-Security-Policy': csp()});
  }
  if (rest === 'data/plugin_entry.html') {
    if (url.searchParams.get('name') !== PLUGIN) return send(res, 404, 'text/plain', 'no such plugin');
    const sha = crypto.createHash('sha256').update(ENTRY_SCRIPT).digest('base64');
    return send(res, 200, TYPES['.html'], ENTRY_HTML, {'Content-Security-Policy': csp([sha])});
  }
  const prefix = `data/plugin/${PLUGIN}/`;
  if (!rest.startsWith(prefix)) return send(res, 404, 'text/plain; charset=utf-8', 'not found');
  const route = rest.slice(prefix.length);
  if (route === 'index.js' || route === 'index.css') return serveFile(res, path.join(staticDir, route));
  if (set === 'broken') {
    if (route === 'runs') return send(res, 500, 'text/plain; charset=utf-8', 'Internal error: event file exp9/events.out.tfevents.1 could not be read');
    return send(res, 404, 'text/plain; charset=utf-8', 'not found');
  }
  let data;
  try {
    data = loadSet(set);
  } catch (e) {
    return send(res, 500, 'text/plain; charset=utf-8', `fixture error: ${e.message}`);
  }
  const json = (body) => send(res, 200, 'application/json', JSON.stringify(body));
  if (route === 'runs') return json(data.runs);
  if (route === 'rules') return json(data.rules);
  if (route === 'analysis') {
    const run = url.searchParams.get('run');
    if (run === null) return send(res, 400, 'text/plain; charset=utf-8', 'missing required query parameter: run');
    if (!(run in data.analysis)) return send(res, 404, 'text/plain; charset=utf-8', `no such run: ${run}`);
    return json(data.analysis[run]);
  }
  return send(res, 404, 'text/plain; charset=utf-8', 'not found');
});

server.listen(port, host, () => {
  const addr = server.address();
  console.log(`crash signals dev server: http://${addr.address}:${addr.port}/default/`);
});
