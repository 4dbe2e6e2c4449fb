// The native peer: llama.cpp's prefill of the routing texts through npm
// `node-llama-cpp`'s prebuilt linux-x64 binaries (dev-only, no compile
// step), CPU only, for every combination of weights (Q4_0, Q4_1, Q8_0 copies
// of the same checkpoint), thread count and flash attention on/off.
//
//   node tests/peers/native-llama.mjs --prompts P.json --models Q4_0=a.gguf,Q8_0=b.gguf \
//     --threads 1,2 --flash on,off [--warmup 1] [--iterations 3] --out native-llama.json
//
// One prefill is `evaluateWithoutGeneratingNewTokens` of the text's tokens
// (special tokens parsed, as wllama's completion does) on an emptied
// sequence: every call prefills the whole text, like the router's decide.

import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { nativeLlama } from './llama-native.mjs';

const { values: args } = parseArgs({
  options: {
    prompts: { type: 'string' },
    models: { type: 'string' },
    threads: { type: 'string', default: '1,2' },
    flash: { type: 'string', default: 'on,off' },
    warmup: { type: 'string', default: '1' },
    iterations: { type: 'string', default: '3' },
    out: { type: 'string' },
  },
});
for (const required of ['prompts', 'models', 'out']) {
  if (!args[required]) throw new Error(`native-llama: --${required} is required`);
}
const prompts = JSON.parse(await readFile(args.prompts, 'utf8'));
const models = args.models.split(',').map((pair) => {
  const [quant, path] = pair.split('=');
  if (!quant || !path) throw new Error(`native-llama: --models takes QUANT=path pairs, got "${pair}"`);
  return { quant, path };
});
const threadCounts = args.threads.split(',').map(Number);
const flashModes = args.flash.split(',').map((f) => {
  if (f !== 'on' && f !== 'off') throw new Error(`native-llama: --flash takes on and/or off, got "${f}"`);
  return f === 'on';
});
const log = (m) => console.error(`native-llama: ${m}`);

const { llama, cpuVariant } = await nativeLlama();
const runs = [];
for (const { quant, path } of models) {
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  for (const threads of threadCounts) {
    for (const flashAttention of flashModes) {
      log(`${quant}, ${threads} thread(s), flash attention ${flashAttention ? 'on' : 'off'}`);
      const context = await model.createContext({ contextSize: 2048, batchSize: 2048, threads: { ideal: threads, min: threads }, flashAttention, sequences: 1 });
      const sequence = context.getSequence();
      const prefill = async (tokens) => {
        await sequence.clearHistory();
        const started = performance.now();
        await sequence.evaluateWithoutGeneratingNewTokens(tokens);
        return performance.now() - started;
      };
      const results = [];
      for (const p of prompts) {
        const tokens = model.tokenize(p.routing_text, true);
        const cold = await prefill(tokens);
        for (let i = 0; i < Number(args.warmup); i++) await prefill(tokens);
        const warm = [];
        for (let i = 0; i < Number(args.iterations); i++) warm.push(await prefill(tokens));
        results.push({ tokens: p.tokens, prompt_tokens_llamacpp: tokens.length, cold_ms: cold, warm_ms: warm });
      }
      runs.push({ quant, threads, flash_attention: flashAttention, results });
      await context.dispose();
    }
  }
  await model.dispose();
}
await writeFile(args.out, JSON.stringify({ binaries: '@node-llama-cpp/linux-x64', cpu_variant: cpuVariant(), cpu_only: true, runs }, null, 2));
await llama.dispose();
