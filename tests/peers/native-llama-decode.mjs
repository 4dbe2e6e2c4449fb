// The native peer's decode: llama.cpp's generation through npm
// `node-llama-cpp`'s prebuilt linux-x64 binaries (dev-only, no compile
// step), CPU only, for every combination of weights, thread count and flash
// attention, measured as `router-generate --decode-speed` measures ours:
//
// - one sequence at each context: the routing text of exactly that many
//   tokens evaluated (untimed), then `warmup` generated tokens dropped and
//   `steps` timed one by one; the row's figure is the median gap;
// - `B` sequences of one context together (node-llama-cpp batches the
//   evaluations of a context's sequences that are queued at once into one
//   llama.cpp decode): every sequence's text evaluated, then all `B`
//   generate concurrently; after `warmup` tokens each, the wall time of
//   the next `steps` tokens of every sequence gives the aggregate rate.
//
// Greedy, and the end of turn never ends a generation early: tokens are
// taken from the generator until the count is reached.
//
//   node tests/peers/native-llama-decode.mjs --prompts P.json --models Q4_0=a.gguf,Q8_0=b.gguf \
//     --threads 1,2 --flash on,off --contexts 256,1024 --batches 1,4,8,16 --batch-context 256 \
//     [--warmup 4] [--steps 32] --out native-llama-decode.json

import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { nativeLlama } from './llama-native.mjs';

const { values: args } = parseArgs({
  options: {
    prompts: { type: 'string' },
    models: { type: 'string' },
    threads: { type: 'string', default: '1,2' },
    flash: { type: 'string', default: 'on,off' },
    contexts: { type: 'string', default: '256,1024' },
    batches: { type: 'string', default: '1,4,8,16' },
    'batch-context': { type: 'string', default: '256' },
    warmup: { type: 'string', default: '4' },
    steps: { type: 'string', default: '32' },
    out: { type: 'string' },
  },
});
for (const required of ['prompts', 'models', 'out']) {
  if (!args[required]) throw new Error(`native-llama-decode: --${required} is required`);
}
const numbers = (flag) =>
  args[flag].split(',').map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1) throw new Error(`native-llama-decode: --${flag} takes whole numbers of at least 1, got "${s}"`);
    return n;
  });
const prompts = JSON.parse(await readFile(args.prompts, 'utf8'));
const models = args.models.split(',').map((pair) => {
  const [quant, path] = pair.split('=');
  if (!quant || !path) throw new Error(`native-llama-decode: --models takes QUANT=path pairs, got "${pair}"`);
  return { quant, path };
});
const threadCounts = numbers('threads');
const flashModes = args.flash.split(',').map((f) => {
  if (f !== 'on' && f !== 'off') throw new Error(`native-llama-decode: --flash takes on and/or off, got "${f}"`);
  return f === 'on';
});
const contexts = numbers('contexts');
const batches = numbers('batches');
const [batchContext] = numbers('batch-context');
const [warmup] = args.warmup === '0' ? [0] : numbers('warmup');
const [steps] = numbers('steps');
const textOf = (tokens) => {
  const p = prompts.find((q) => q.tokens === tokens);
  if (!p) throw new Error(`native-llama-decode: --prompts has no text of ${tokens} tokens (it has ${prompts.map((q) => q.tokens).join(', ')})`);
  return p.routing_text;
};
// Every (context, batch) row once, the one-sequence rows first (as ours).
const rows = contexts.map((c) => [c, 1]);
for (const b of batches) if (!rows.some(([c, x]) => c === batchContext && x === b)) rows.push([batchContext, b]);
const log = (m) => console.error(`native-llama-decode: ${m}`);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = (s.length - 1) / 2;
  return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
};

const { llama, cpuVariant } = await nativeLlama();

// One sequence's generator after its prompt: each `next()` is one decode
// step of that sequence (evaluated in a batch with whatever else is queued).
async function generatorAfter(sequence, tokens) {
  await sequence.clearHistory();
  await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(0, -1));
  // The end of turn is yielded like any token, and the generation goes on past it.
  return sequence.evaluate(tokens.slice(-1), { temperature: 0, yieldEogToken: true });
}

const runs = [];
for (const { quant, path } of models) {
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  for (const threads of threadCounts) {
    for (const flashAttention of flashModes) {
      log(`${quant}, ${threads} thread(s), flash attention ${flashAttention ? 'on' : 'off'}`);
      const results = [];
      for (const [context, batch] of rows) {
        const tokens = model.tokenize(textOf(context), true);
        const perSequence = tokens.length + warmup + steps + 8;
        const ctx = await model.createContext({
          contextSize: perSequence,
          batchSize: Math.max(512, batch),
          threads: { ideal: threads, min: threads },
          flashAttention,
          sequences: batch,
        });
        const sequences = Array.from({ length: batch }, () => ctx.getSequence());
        const generators = [];
        for (const s of sequences) generators.push(await generatorAfter(s, tokens));
        const take = async (generator, n) => {
          for (let i = 0; i < n; i++) {
            const { done } = await generator.next();
            if (done) throw new Error('native-llama-decode: the generator ended early');
          }
        };
        await Promise.all(generators.map((g) => take(g, warmup)));
        let gaps = [];
        let stepMs;
        if (batch === 1) {
          let last = performance.now();
          for (let i = 0; i < steps; i++) {
            await take(generators[0], 1);
            const now = performance.now();
            gaps.push(now - last);
            last = now;
          }
          stepMs = median(gaps);
        } else {
          const started = performance.now();
          await Promise.all(generators.map((g) => take(g, steps)));
          stepMs = (performance.now() - started) / steps;
        }
        for (const g of generators) await g.return();
        results.push({ context, batch, prompt_tokens_llamacpp: tokens.length, step_ms: stepMs, gaps_ms: gaps, tokens_per_s: (batch * 1000) / stepMs });
        log(`  context ${context} × ${batch}: ${((batch * 1000) / stepMs).toFixed(1)} tokens/s`);
        await ctx.dispose();
      }
      runs.push({ quant, threads, flash_attention: flashAttention, results });
    }
  }
  await model.dispose();
}
await writeFile(args.out, JSON.stringify({ binaries: '@node-llama-cpp/linux-x64', cpu_variant: cpuVariant(), cpu_only: true, warmup, steps, runs }, null, 2));
await llama.dispose();
