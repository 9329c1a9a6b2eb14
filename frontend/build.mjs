// Bundles src/index.js (and the CSS it imports: uPlot's + ours) into the Python package:
//   ../tb_crash_signals/tb_plugin/static/index.js   ES module exporting render()
//   ../tb_crash_signals/tb_plugin/static/index.css
// Usage: node build.mjs [--watch] [--dev]
import * as esbuild from 'esbuild';
import {fileURLToPath} from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, '..', 'tb_crash_signals', 'tb_plugin', 'static');
const watch = process.argv.includes('--watch');
const dev = process.argv.includes('--dev');

const options = {
  entryPoints: {index: path.join(here, 'src', 'index.js')},
  bundle: true,
  format: 'esm',
  target: 'es2020',
  outdir,
  minify: !dev,
  sourcemap: dev ? 'inline' : false,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'info',
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
