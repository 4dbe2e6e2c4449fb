// The decode peer bench in the browser: our page's decode-speed panel (the
// threads build on a cross-origin isolated origin, the single-thread build
// on one that is not, each precision) against wllama's generation (llama.cpp
// in wasm) on Q4_0, Q4_1 and Q8_0 copies of the same weights, at 1 thread
// and every core, flash attention on and off, in one Chromium, one round.
// Prints one sequence's tokens a second per context side by side with the
// ratio to wllama's best configuration, our batched rows beside them, and
// writes reports/decode-browser.json. Run after scripts/bench-decode-peers.sh
// has made the copies and the prompts (test-output/peers/), with the site
// built (scripts/build-site.sh).
//
//   node tests/peers/decode-browser.mjs [--precisions int8,f32] [--quants Q4_0,Q4_1,Q8_0] [--flash on,off]
//     [--contexts 256,1024] [--batches 1,4,8] [--batch-context 256] [--steps 32] [--out reports/decode-browser.json]

import { readFile, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { serve } from '../../tools/static-server.mjs';
import { launch, newPage, root, site } from '../e2e/harness.js';

const { values: args } = parseArgs({
  options: {
    precisions: { type: 'string', default: 'int8,f32' },
    quants: { type: 'string', default: 'Q4_0,Q4_1,Q8_0' },
    flash: { type: 'string', default: 'on,off' },
    contexts: { type: 'string', default: '256,1024' },
    batches: { type: 'string', default: '1,4,8' },
    'batch-context': { type: 'string', default: '256' },
    steps: { type: 'string', default: '32' },
    out: { type: 'string', default: 'reports/decode-browser.json' },
  },
});
const work = join(root, 'test-output', 'peers');
const log = (m) => console.error(`decode-browser: ${m}`);
const contexts = args.contexts.split(',').map(Number);
const prompts = JSON.parse(await readFile(join(work, 'decode-prompts.json'), 'utf8')).filter((p) => contexts.includes(p.tokens));
if (prompts.length !== contexts.length) throw new Error('decode-browser: run scripts/bench-decode-peers.sh first (test-output/peers/decode-prompts.json lacks a context)');
const threadCounts = [...new Set([1, availableParallelism()])];

/** Our panel's rows, read from its table: context, batch, tokens/s. */
function panelRows(text) {
  return [...text.matchAll(/^\s*(\d+)\s+(\d+)\s.*?\s(\d+\.\d)\s+(\S+)\s+\d+\.\d\s+(\d+ %|–)$/gm)].map((m) => ({ context: Number(m[1]), batch: Number(m[2]), tokens_per_s: Number(m[3]) }));
}

const mounts = { '/peers/': join(root, 'tests', 'peers'), '/peer-models/': work };
const isolated = await serve(site, 0, { mounts, crossOriginIsolated: true });
const plain = await serve(site, 0, { mounts, crossOriginIsolated: false });
const browser = await launch();
const ours = [];
const wllama = [];
try {
  for (const [server, build] of [[isolated, 'threads'], [plain, 'single-thread']]) {
    for (const precision of args.precisions.split(',')) {
      log(`ours, ${build} build, ${precision}`);
      const page = await newPage(browser);
      await page.goto(`${server.url}router/#router&precision=${precision}`);
      await page.waitForFunction(() => document.querySelector('[data-testid=model-load]') && !document.querySelector('[data-testid=model-load]').disabled, null, { timeout: 120_000 });
      await page.getByTestId('model-load').click();
      await page.waitForFunction(() => ['ready', 'failed'].includes(document.querySelector('[data-testid=model-status]')?.textContent), null, { timeout: 600_000 });
      await page.getByTestId('decode-contexts').fill(args.contexts);
      await page.getByTestId('decode-batches').fill(args.batches);
      await page.getByTestId('decode-batch-context').fill(args['batch-context']);
      await page.getByTestId('decode-steps').fill(args.steps);
      await page.getByTestId('decode-run').click();
      const report = page.getByTestId('decode-speed');
      await report.waitFor({ timeout: 3600_000 });
      const text = await report.textContent();
      log(text);
      const isolatedPage = await page.evaluate(() => crossOriginIsolated);
      if ((build === 'threads') !== isolatedPage) throw new Error(`the ${build} page was ${isolatedPage ? '' : 'not '}cross-origin isolated`);
      ours.push({ build, precision, text, rows: panelRows(text) });
      await page.context().close();
    }
  }
  for (const quant of args.quants.split(',')) {
    for (const threads of threadCounts) {
      for (const flash of args.flash.split(',')) {
        log(`wllama, ${quant}, ${threads} thread(s), flash attention ${flash}`);
        const page = await newPage(browser);
        await page.goto(`${isolated.url}peers/wllama.html`);
        await page.waitForFunction(() => window.peerReady === true);
        const result = await page.evaluate((o) => window.runWllamaDecode(o), {
          modelUrl: `/peer-models/SmolLM2-135M-Instruct.${quant}.gguf`,
          threads,
          flashAttention: flash === 'on',
          prompts,
          steps: Number(args.steps),
        });
        log(result.results.map((r) => `context ${r.context}: ${r.tokens_per_s?.toFixed(1)} tokens/s`).join(', '));
        wllama.push({ quant, flash_attention: flash === 'on', ...result });
        await page.context().close();
      }
    }
  }
} finally {
  await browser.close();
  await isolated.close();
  await plain.close();
}

// One sequence per context: ours per build and precision, wllama's best
// (any thread count) and best at one thread, and the ratios the issue asks
// for (threads build ÷ wllama's best; single-thread build ÷ wllama's best
// at one thread).
const best = (context, threads) =>
  wllama
    .filter((w) => threads === undefined || w.threads === threads)
    .map((w) => ({ quant: w.quant, threads: w.threads, flash_attention: w.flash_attention, tokens_per_s: w.results.find((r) => r.context === context)?.tokens_per_s ?? 0 }))
    .reduce((a, b) => (b.tokens_per_s > a.tokens_per_s ? b : a));
const rate = (build, precision, context, batch = 1) => ours.find((o) => o.build === build && o.precision === precision)?.rows.find((r) => r.context === context && r.batch === batch)?.tokens_per_s;
const table = contexts.map((context) => {
  const mine = Object.fromEntries(ours.map((o) => [`${o.build} ${o.precision}`, rate(o.build, o.precision, context)]));
  const wBest = best(context);
  const wOne = best(context, 1);
  const fastest = (build) => Math.max(...ours.filter((o) => o.build === build).map((o) => rate(build, o.precision, context) ?? 0));
  return { context, ours: mine, wllama_best: wBest, wllama_best_one_thread: wOne, threads_ratio: fastest('threads') / wBest.tokens_per_s, single_thread_ratio: fastest('single-thread') / wOne.tokens_per_s };
});
console.log('one sequence, tokens/s (browser, one round):');
for (const row of table) {
  console.log(
    `context ${row.context}: ours ${Object.entries(row.ours).map(([k, v]) => `${k} ${v?.toFixed(1)}`).join(', ')}; ` +
      `wllama best ${row.wllama_best.tokens_per_s.toFixed(1)} (${row.wllama_best.quant}, ${row.wllama_best.threads} thread(s)${row.wllama_best.flash_attention ? ', FA' : ''}), ` +
      `at one thread ${row.wllama_best_one_thread.tokens_per_s.toFixed(1)}; threads build ÷ best ${row.threads_ratio.toFixed(2)}×, single-thread build ÷ best at one thread ${row.single_thread_ratio.toFixed(2)}×`,
  );
}
console.log('ours batched (aggregate tokens/s at the batch context):');
for (const o of ours) console.log(`${o.build} ${o.precision}: ${o.rows.filter((r) => r.context === Number(args['batch-context'])).map((r) => `B=${r.batch} ${r.tokens_per_s}`).join(', ')}`);
await writeFile(
  join(root, args.out),
  JSON.stringify({ schema: 'workbench.decode-browser/1', created: new Date().toISOString(), hardware_threads: availableParallelism(), steps: Number(args.steps), table, ours, wllama }, null, 2),
);
log(`wrote ${args.out}`);
