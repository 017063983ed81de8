// ort_profile.js — ONNX Runtime's own per-node profile of a model (its `enableProfiling`), the
// peer's side of bench/onnx/limits.sh. Same session options as ort_time.js.
//
// Usage: node ort_profile.js THREADS RUNS MODEL.onnx BATCH OUT.json
//   runs the model RUNS times after one warm-up run, then moves ORT's trace (a Chrome
//   trace-event list, one "Node" event per node and run) to OUT.json.
// ORT_NODE_MODULES names the folder holding node_modules/onnxruntime-node.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { ort, sessionOptions, randomFeeds } = require('./ort_time.js');

async function main() {
  const [threads, runs, file, batch, out] = process.argv.slice(2);
  if (!out) throw new Error('usage: node ort_profile.js THREADS RUNS MODEL.onnx BATCH OUT.json');
  const prefix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ortprof-')), 'p');
  const session = await ort.InferenceSession.create(file, { ...sessionOptions(threads), enableProfiling: true, profileFilePrefix: prefix });
  const feeds = randomFeeds(session, file, batch);
  for (let r = 0; r <= Number(runs); r++) await session.run(feeds);
  session.endProfiling();
  const dir = path.dirname(prefix);
  const written = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  if (written.length !== 1) throw new Error(`expected one profile in ${dir}, found ${written.length}`);
  fs.copyFileSync(path.join(dir, written[0]), out);
  fs.rmSync(dir, { recursive: true });
}

main().catch((e) => { console.error(`ort_profile.js: ${e.message}`); process.exit(1); });
