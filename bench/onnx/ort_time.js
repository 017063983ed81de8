// ort_time.js — the ONNX Runtime side of bench/onnx/run.sh: the same .onnx file Kiln compiles,
// timed through onnxruntime-node's CPU build (a benchmark peer only; Kiln never links it).
//
// Usage: node ort_time.js THREADS SECS MODEL.onnx BATCH
//   THREADS  intraOpNumThreads (Kiln's KILN_NUM_THREADS); interOpNumThreads is 1, execution
//            sequential, every graph optimisation on
//   SECS     minimum length of one timed run; the best of 5 runs is kept
// Prints two TSV lines in kiln_bench_models' format:
//   MODEL  predict  BATCH  samples/s  iterations-per-run
//   MODEL  create   BATCH  milliseconds from session creation to the end of the first run
// The input is uniform in [-1, 1), as kiln_bench_models fills it. ORT_NODE_MODULES names the
// folder holding node_modules/onnxruntime-node (bench/onnx/run.sh installs it there).
'use strict';
const path = require('path');
const modules = process.env.ORT_NODE_MODULES || __dirname;
const ort = require(path.join(modules, 'node_modules', 'onnxruntime-node'));

// The session options of both sides' comparison (ort_profile.js adds profiling to them).
function sessionOptions(threads) {
  return {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
}

// Every input of the session, uniform in [-1, 1), a symbolic axis at the batch.
function randomFeeds(session, file, batch) {
  const feeds = {};
  for (const inputName of session.inputNames) {
    const meta = session.inputMetadata.find ? session.inputMetadata.find((m) => m.name === inputName) : null;
    const dims = meta && meta.shape ? meta.shape.map((d) => (typeof d === 'number' ? d : Number(batch))) : null;
    if (!dims) throw new Error(`${file}: cannot read the shape of input ${inputName}`);
    const n = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = Math.random() * 2 - 1;
    feeds[inputName] = new ort.Tensor('float32', data, dims);
  }
  return feeds;
}

async function main() {
  const [threads, secs, file, batch] = process.argv.slice(2);
  const name = path.basename(file, '.onnx');
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(file, sessionOptions(threads));
  const feeds = randomFeeds(session, file, batch);
  await session.run(feeds);
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;
  let best = Infinity, iters = 1;
  for (let r = 0; r < 5; r++) {
    let n = 0;
    const start = process.hrtime.bigint();
    let el;
    for (;;) {
      await session.run(feeds);
      n++;
      el = Number(process.hrtime.bigint() - start) / 1e9;
      if (el >= Number(secs)) break;
    }
    if (el / n < best) best = el / n, iters = n;
  }
  console.log(`${name}\tpredict\t${batch}\t${(Number(batch) / best).toFixed(1)}\t${iters}`);
  console.log(`${name}\tcreate\t${batch}\t${createMs.toFixed(1)}`);
}

module.exports = { ort, sessionOptions, randomFeeds };
if (require.main === module) main().catch((e) => { console.error(`ort_time.js: ${e.message}`); process.exit(1); });
