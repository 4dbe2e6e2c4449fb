// The peer bench: in one run and one headless Chromium, our router page's
// decide, wllama's prefill of the same GGUF on the same routing texts (one
// thread, then every core with the page cross-origin isolated), our native
// bench-decide, and the matmul probes that give the GEMM floors. Prints the
// table with ratios and writes reports/peers.json.
//
//   scripts/bench-peers.sh [--iterations 5] [--warmup 1] [--peer-iterations 3] [--peer-warmup 1]
//
// The peer is a dev-only npm package (tests/peers/package.json); nothing here
// is part of the product.

import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { serve } from '../../tools/static-server.mjs';
import { launch, newPage, root, site } from '../e2e/harness.js';
import { runPageBench, pageGemmProbe } from '../e2e/page-bench.js';

const { values: args } = parseArgs({
  options: {
    lengths: { type: 'string', default: '15,256,1024' },
    iterations: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    'peer-iterations': { type: 'string', default: '3' },
    'peer-warmup': { type: 'string', default: '1' },
    out: { type: 'string', default: 'reports/peers.json' },
  },
});
const lengths = args.lengths.split(',').map(Number);
const work = join(root, 'test-output', 'peers');
await mkdir(work, { recursive: true });
const log = (m) => console.error(`bench-peers: ${m}`);
const cargo = (bin, rest) =>
  execFileSync('cargo', ['run', '--release', '--quiet', '-p', 'bench-cli', '--bin', bin, '--', ...rest], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });

// Native: bench-decide (which also writes the exact routing texts every
// engine here prefills) and the native matmul probe with the FLOP counts.
log('native bench-decide');
const promptsFile = join(work, 'prompts.json');
const nativeFile = join(work, 'native.json');
cargo('bench-decide', ['--lengths', args.lengths, '--iterations', args.iterations, '--warmup', args.warmup, '--dump-prompts', promptsFile, '--out', nativeFile]);
const native = JSON.parse(await readFile(nativeFile, 'utf8'));
const nativeGemm = JSON.parse(cargo('gemm-probe', ['--checkpoint', 'assets/SmolLM2-135M-Instruct.Q4_1.gguf', '--lengths', args.lengths]));
const prompts = JSON.parse(await readFile(promptsFile, 'utf8'));

// Browser: one Chromium, the site served cross-origin isolated (wllama's
// threads need it; our single-threaded build runs the same either way).
const server = await serve(site, 0, { mounts: { '/peers/': join(root, 'tests', 'peers') }, crossOriginIsolated: true });
const browser = await launch();
let ours;
let oursGemm;
const peers = [];
try {
  log('our router page');
  const page = await newPage(browser, { acceptDownloads: true });
  ours = await runPageBench(page, server.url, { lengths: args.lengths, warmup: args.warmup, iterations: args.iterations, out: join(work, 'browser.json'), log });
  oursGemm = await pageGemmProbe(page);
  await page.context().close();

  const hardwareThreads = native.environment.threads;
  for (const threads of [...new Set([1, hardwareThreads])]) {
    log(`wllama, ${threads} thread(s)`);
    const peer = await newPage(browser);
    await peer.goto(`${server.url}peers/wllama.html`);
    await peer.waitForFunction(() => window.peerReady === true);
    peers.push(
      await peer.evaluate((o) => window.runWllama(o), {
        modelUrl: '/router/models/SmolLM2-135M-Instruct.Q4_1.gguf',
        threads,
        prompts,
        warmup: Number(args['peer-warmup']),
        iterations: Number(args['peer-iterations']),
      }),
    );
    await peer.context().close();
  }
} finally {
  await browser.close();
  await server.close();
}

// The table and the ratios, from this one run.
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = (s.length - 1) / 2;
  return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
};
const p95 = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const pos = 0.95 * (s.length - 1);
  return s[Math.floor(pos)] + (s[Math.ceil(pos)] - s[Math.floor(pos)]) * (pos - Math.floor(pos));
};
const fmt = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`);
const rows = lengths.map((tokens) => {
  const o = ours.results.find((r) => r.prompt_tokens === tokens);
  const n = native.results.find((r) => r.prompt_tokens === tokens);
  const w = peers.map((p) => p.results.find((r) => r.tokens === tokens));
  const wllamaP50 = w.map((r) => median(r.warm_ms));
  const best = Math.min(...wllamaP50);
  const flops = nativeGemm.prefill_flops[String(tokens)];
  return {
    prompt_tokens: tokens,
    prefill_gflop: flops / 1e9,
    ours_cold_ms: o.cold_ms,
    ours_p50_ms: o.warm.p50,
    ours_p95_ms: o.warm.p95,
    ours_gflops: flops / o.warm.p50 / 1e6,
    wllama: peers.map((p, i) => ({ threads: p.threads, cold_ms: w[i].cold_ms, p50_ms: wllamaP50[i], p95_ms: p95(w[i].warm_ms), prompt_tokens_llamacpp: w[i].prompt_tokens_llamacpp })),
    wllama_best_p50_ms: best,
    native_cold_ms: n.cold_ms,
    native_p50_ms: n.warm.p50,
    ratio_vs_wllama: o.warm.p50 / best,
    ours_cold_over_warm: o.cold_ms / o.warm.p50,
    ours_share_of_wasm_gemm: flops / o.warm.p50 / 1e6 / oursGemm.gflops,
    native_gemm_floor_ms: flops / nativeGemm.probe.gflops / 1e6,
    native_over_floor: n.warm.p50 / (flops / nativeGemm.probe.gflops / 1e6),
  };
});
const holds = (subset, test) => (subset.length === 0 ? 'not measured' : subset.every(test) ? 'met' : 'not met');
const report = {
  schema: 'workbench.peers/1',
  started: new Date().toISOString(),
  protocol: {
    lengths,
    ours: { warmup: Number(args.warmup), iterations: Number(args.iterations) },
    wllama: { warmup: Number(args['peer-warmup']), iterations: Number(args['peer-iterations']), note: 'fewer iterations: the peer is slow' },
  },
  environment: { browser: ours.environment.user_agent, hardware_concurrency: ours.environment.hardware_concurrency, cpu: native.environment.cpu_model, git_revision: native.environment.git_revision },
  gemm: { wasm_gflops: oursGemm.gflops, wasm_line: oursGemm.line, native: nativeGemm.probe },
  wllama_load_ms: peers.map((p) => ({ threads: p.threads, load_ms: p.loadMs, cross_origin_isolated: p.crossOriginIsolated })),
  ours_load: ours.load,
  rows,
  // A target whose lengths were not measured is "not measured", never met.
  targets: {
    'ours p50 ≤ 0.2 × wllama best at 256 and 1,024 tokens': holds(rows.filter((r) => r.prompt_tokens === 256 || r.prompt_tokens === 1024), (r) => r.ratio_vs_wllama <= 0.2),
    'ours at 1,024 tokens ≥ 50 % of the wasm GEMM rate': holds(rows.filter((r) => r.prompt_tokens === 1024), (r) => r.ours_share_of_wasm_gemm >= 0.5),
    'our first call ≤ 1.2 × our warm p50 at every length': holds(rows, (r) => r.ours_cold_over_warm <= 1.2),
    'native p50 at 1,024 tokens ≤ 2 × the GEMM floor': holds(rows.filter((r) => r.prompt_tokens === 1024), (r) => r.native_over_floor <= 2),
  },
};
await writeFile(join(root, args.out), JSON.stringify(report, null, 2));

const header = ['tokens', 'ours cold', 'ours p50', ...peers.map((p) => `wllama ${p.threads}T p50`), 'ours ÷ wllama best', 'ours GFLOP/s (% wasm GEMM)', 'native p50', 'native ÷ GEMM floor'];
const table = [header, ...rows.map((r) => [
  String(r.prompt_tokens),
  fmt(r.ours_cold_ms),
  fmt(r.ours_p50_ms),
  ...r.wllama.map((w) => fmt(w.p50_ms)),
  `${r.ratio_vs_wllama.toFixed(2)}×`,
  `${r.ours_gflops.toFixed(1)} (${(100 * r.ours_share_of_wasm_gemm).toFixed(0)} %)`,
  fmt(r.native_p50_ms),
  `${r.native_over_floor.toFixed(2)}×`,
])];
console.log(table.map((r) => `| ${r.join(' | ')} |`).join('\n'));
console.log(`\nwasm GEMM (page probe): ${oursGemm.gflops.toFixed(1)} GFLOP/s; native GEMM: ${nativeGemm.probe.gflops.toFixed(1)} GFLOP/s.`);
console.log(`ours: ${args.warmup} warm-up(s), ${args.iterations} iterations; wllama: ${args['peer-warmup']} warm-up(s), ${args['peer-iterations']} iterations (the peer is slow).`);
for (const [target, verdict] of Object.entries(report.targets)) console.log(`${verdict.padEnd(12)}  ${target}`);
console.log(`wrote ${args.out}`);
