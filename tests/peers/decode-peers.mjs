// The decode peer bench, natively: our engine's decode (`router-generate
// --decode-speed`, each precision, at 1 thread and at every core) against
// native llama.cpp (node-llama-cpp's prebuilt binaries) on Q4_0, Q4_1 and
// Q8_0 copies of the same weights, at 1 thread and every core, flash
// attention on and off, in one run; rows as issue 36 asks (one sequence at
// 256 and 1,024 tokens, the aggregate at B = 1, 4, 8, 16 at 256). Prints
// every row's figures side by side with the ratio to llama.cpp's best
// configuration at the same thread count, and writes
// reports/decode-peers.json.
//
// The run is cut into rounds, ours and then llama.cpp in each, and each
// figure is the median over rounds: this VM's speed drifts over minutes.
// The browser half of the comparison (our worker builds, wllama) is not
// measured here.
//
//   node tests/peers/decode-peers.mjs [--rounds 2] [--precisions int8,f32] [--quants Q4_0,Q4_1,Q8_0]
//     [--flash on,off] [--contexts 256,1024] [--batches 1,4,8,16] [--batch-context 256]
//     [--warmup 4] [--steps 32] [--out reports/decode-peers.json]

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { copyFile, mkdir, readFile, writeFile, access } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '2' },
    precisions: { type: 'string', default: 'int8,f32' },
    quants: { type: 'string', default: 'Q4_0,Q4_1,Q8_0' },
    flash: { type: 'string', default: 'on,off' },
    contexts: { type: 'string', default: '256,1024' },
    batches: { type: 'string', default: '1,4,8,16' },
    'batch-context': { type: 'string', default: '256' },
    warmup: { type: 'string', default: '4' },
    steps: { type: 'string', default: '32' },
    out: { type: 'string', default: 'reports/decode-peers.json' },
  },
});
const rounds = Number(args.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`decode-peers: --rounds takes a whole number of at least 1, got "${args.rounds}"`);
const precisions = args.precisions.split(',');
for (const p of precisions) if (!['f32', 'int8'].includes(p)) throw new Error(`decode-peers: --precisions takes f32 and/or int8, got "${p}"`);
const quants = args.quants.split(',');
for (const q of quants) if (!['Q4_0', 'Q4_1', 'Q8_0'].includes(q)) throw new Error(`decode-peers: --quants takes Q4_0, Q4_1 and/or Q8_0, got "${q}"`);
const work = join(root, 'test-output', 'peers');
await mkdir(work, { recursive: true });
const log = (m) => console.error(`decode-peers: ${m}`);
const run = (cmd, rest, env = {}) =>
  execFileSync(cmd, rest, { cwd: root, encoding: 'utf8', env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
const bin = (name) => join(root, 'target', 'release', name);
const hardwareThreads = availableParallelism();
const threadCounts = [...new Set([1, hardwareThreads])];
const contexts = args.contexts.split(',').map(Number);
const shared = ['--contexts', args.contexts, '--batches', args.batches, '--batch-context', args['batch-context'], '--warmup', args.warmup, '--steps', args.steps];
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = (s.length - 1) / 2;
  return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
};
function cpuFlags() {
  try {
    const flags = new Set(readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m)[1].trim().split(/\s+/));
    return ['avx2', 'avx512f', 'avx512bw', 'avx512_vnni', 'avx_vnni', 'amx_tile', 'amx_int8'].filter((f) => flags.has(f));
  } catch {
    return null;
  }
}

// The weights: the bundled file and llama.cpp's own requantized copies.
const bundled = 'SmolLM2-135M-Instruct.Q4_1.gguf';
const modelFile = {};
for (const q of quants) {
  modelFile[q] = join(work, `SmolLM2-135M-Instruct.${q}.gguf`);
  if (q === 'Q4_1') await copyFile(join(root, 'assets', bundled), modelFile[q]);
  else if (!(await access(modelFile[q]).then(() => true, () => false))) {
    log(`quantizing a ${q} copy with llama.cpp's quantizer`);
    run('python3', ['tests/peers/quantize.py', join('assets', bundled), modelFile[q], q]);
  }
}
// The exact routing texts both engines prefill, from bench-decide.
const promptsFile = join(work, 'decode-prompts.json');
const lengths = [...new Set([...contexts, Number(args['batch-context'])])].join(',');
run(bin('bench-decide'), ['--lengths', lengths, '--iterations', '1', '--warmup', '0', '--quiet', '--dump-prompts', promptsFile, '--out', join(work, 'decode-prompts.bench.json')]);

const ours = [];
const llama = [];
for (let round = 1; round <= rounds; round++) {
  for (const precision of precisions) {
    for (const threads of threadCounts) {
      log(`round ${round}/${rounds}: ours, ${precision}, ${threads} thread(s)`);
      const file = join(work, `decode.ours.${precision}.${threads}T.round${round}.json`);
      run(bin('router-generate'), ['--decode-speed', '--precision', precision, ...shared, '--bandwidth-mib', threads === hardwareThreads ? '256' : '0', '--out', file], { RAYON_NUM_THREADS: String(threads) });
      ours.push({ round, precision, threads, speed: JSON.parse(await readFile(file, 'utf8')) });
    }
  }
  log(`round ${round}/${rounds}: llama.cpp (node-llama-cpp), every weights × threads × flash attention`);
  const file = join(work, `decode.llama.round${round}.json`);
  run('node', [
    'tests/peers/native-llama-decode.mjs',
    '--prompts', promptsFile,
    '--models', quants.map((q) => `${q}=${modelFile[q]}`).join(','),
    '--threads', threadCounts.join(','),
    '--flash', args.flash,
    ...shared,
    '--out', file,
  ]);
  llama.push({ round, ...JSON.parse(await readFile(file, 'utf8')) });
}

// Every row: ours per precision and thread count, llama.cpp per
// configuration, each the median over rounds; then llama.cpp's best at
// each thread count, and our ratios to it.
const rowKeys = ours[0].speed.rows.map((r) => [r.context, r.batch]);
const table = [];
for (const [context, batch] of rowKeys) {
  for (const threads of threadCounts) {
    const mine = Object.fromEntries(
      precisions.map((p) => [
        p,
        median(ours.filter((o) => o.precision === p && o.threads === threads).map((o) => o.speed.rows.find((r) => r.context === context && r.batch === batch).tokens_per_s)),
      ]),
    );
    const configs = [];
    for (const quant of quants) {
      for (const flash of [true, false]) {
        const perRound = llama
          .map((l) => l.runs.find((r) => r.quant === quant && r.threads === threads && r.flash_attention === flash)?.results.find((x) => x.context === context && x.batch === batch))
          .filter(Boolean);
        if (perRound.length) configs.push({ quant, flash_attention: flash, tokens_per_s: median(perRound.map((x) => x.tokens_per_s)) });
      }
    }
    const best = configs.reduce((a, b) => (b.tokens_per_s > a.tokens_per_s ? b : a));
    table.push({ context, batch, threads, ours: mine, llama_cpp: configs, llama_cpp_best: best, ratio: Object.fromEntries(precisions.map((p) => [p, mine[p] / best.tokens_per_s])) });
  }
}
const bandwidth = ours.find((o) => o.speed.bandwidth)?.speed.bandwidth ?? null;
console.log(`decode tokens/s, median of ${rounds} round(s); llama.cpp's best of ${quants.join('/')} × flash attention on/off at the same thread count; cpu ${cpuFlags()?.join(' ')}; llama.cpp CPU variant ${llama[0].cpu_variant}`);
console.log(`memory bandwidth ${bandwidth ? bandwidth.gb_per_s.toFixed(1) + ' GB/s' : 'not measured'}`);
console.log(['context', 'B', 'threads', ...precisions.map((p) => `ours ${p}`), 'llama.cpp best', 'config', ...precisions.map((p) => `${p} ÷ best`)].join(' | '));
for (const row of table) {
  console.log(
    [
      row.context,
      row.batch,
      row.threads,
      ...precisions.map((p) => row.ours[p].toFixed(1)),
      row.llama_cpp_best.tokens_per_s.toFixed(1),
      `${row.llama_cpp_best.quant}${row.llama_cpp_best.flash_attention ? ' FA' : ''}`,
      ...precisions.map((p) => `${row.ratio[p].toFixed(2)}×`),
    ].join(' | '),
  );
}
await writeFile(
  join(root, args.out),
  JSON.stringify(
    {
      schema: 'workbench.decode-peers/1',
      created: new Date().toISOString(),
      cpu_flags: cpuFlags(),
      hardware_threads: hardwareThreads,
      rounds,
      plan: { contexts, batches: args.batches.split(',').map(Number), batch_context: Number(args['batch-context']), warmup: Number(args.warmup), steps: Number(args.steps) },
      bandwidth,
      table,
      ours: ours.map(({ round, precision, threads, speed }) => ({ round, precision, threads, speed })),
      llama_cpp: llama,
    },
    null,
    2,
  ),
);
log(`wrote ${args.out}`);
