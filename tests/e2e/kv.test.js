// The KV calculator end to end: links with parameters, typing, the URL,
// config import, the embed widget's first load, and offline use.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { newPage, screenshot, outDir, cspViolations, server, browser, useSite, recordSizes, root } from './harness.js';

useSite();

const text = (page, id) => page.getByTestId(id).first().innerText();

async function open(page, query, { expect = 'logical-total' } = {}) {
  await page.goto(`${server.url}${query}`);
  await page.getByTestId(expect).first().waitFor();
}

test('seed example from a link, exactly', async () => {
  const page = await newPage(browser);
  await open(page, '?layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4');
  assert.equal(await text(page, 'formula'), '2 × 32 × 8 × 128 × 2 × 8192 × 4 = 4294967296 bytes');
  assert.equal(await text(page, 'logical-total'), '4.00 GiB');
  assert.equal(await text(page, 'per-token'), '128.00 KiB');
  assert.equal(await text(page, 'per-sequence'), '1.00 GiB');
  assert.equal(await text(page, 'exact-bytes'), '4,294,967,296 bytes');
  assert.equal(await text(page, 'allocated-total'), '4.00 GiB');
  await screenshot(page, 'kv-seed');
  assert.deepEqual(page.problems, []);
  assert.deepEqual(page.blocked, []);
});

test('MLA model (DeepSeek-V3) from a short preset link', async () => {
  const page = await newPage(browser);
  await open(page, '?preset=deepseek-v3&seqs=32768x1');
  // 61 layers × (512 + 64) × 2 bytes = 70,272 bytes per token = 68.625 KiB.
  assert.equal(await text(page, 'per-token'), '68.63 KiB');
  assert.equal(await text(page, 'logical-total'), '2.14 GiB');
  const terms = await text(page, 'logical-terms');
  assert.match(terms, /MLA latent 512 \+ RoPE key 64 · 61 layers/);
  assert.match(terms, /61 × \(512 \+ 64\) × 2 × 32768/);
  // The conventional formula stays visible, for comparison.
  assert.match(await text(page, 'formula'), /^2 × 61 × 128 × 128 × 2 × 32768 × 1 = /);
  assert.match(page.url(), /kv_lora_rank=512/);
  await screenshot(page, 'kv-mla');
});

test('sliding-window model (Gemma-3-27B): one line per layer group, summing to the total', async () => {
  const page = await newPage(browser);
  await open(page, '?preset=gemma-3-27b&seqs=32768&kv_dtype=bf16');
  assert.equal(await text(page, 'logical-total'), '2.91 GiB');
  const rows = await page.getByTestId('logical-terms').first().locator('tbody tr').allInnerTexts();
  assert.equal(rows.length, 2, rows.join('\n'));
  assert.match(rows.join('\n'), /sliding window 1024 · 52 layers/);
  assert.match(rows.join('\n'), /full attention · 10 layers/);
  const bytes = rows.map((r) => BigInt(r.split('\t')[2].replace(/[+,]/g, '')));
  assert.equal(bytes[0] + bytes[1], 3120562176n);
});

test('hybrid model (Qwen3-Next): a constant recurrent state beside the growing K/V, paged as vLLM pages it', async () => {
  const page = await newPage(browser);
  await open(page, '?preset=qwen3-next-80b-a3b&seqs=8192x4');
  // 36 delta-rule layers × (3 × 8,192 × 2 + 32 × 128 × 128 × 2 = 1,097,728 bytes) × 4
  // sequences, plus 12 attention layers × 2,048 bytes × 32,768 tokens.
  assert.equal(await text(page, 'exact-bytes'), '963,379,200 bytes');
  const rows = (await page.getByTestId('logical-terms').first().locator('tbody tr').allInnerTexts()).join('\n');
  assert.match(rows, /linear attention \(gated delta rule\) state · 36 layers · constant per sequence/);
  assert.match(rows, /36 × \(3 × 8192 × 2 \+ 32 × 128 × 128 × 2\) × 4/);
  assert.match(rows, /full attention · 12 layers/);
  // vLLM's block for this model, and each state padded to its page.
  assert.match(await text(page, 'hybrid-page'), /the attention block becomes 544 tokens/);
  assert.equal(await text(page, 'allocated-bytes'), '1,016,070,144');
  assert.match(page.url(), /ssm_state=32x128x128/);
  // Twice the tokens: only the attention term grows.
  await page.fill('#f-seqs', '16384x4');
  await page.waitForFunction(() => document.querySelector('[data-testid=exact-bytes]').innerText === '1,768,685,568 bytes');
  // A bad state is named at its field, and the figures wait for it.
  await page.fill('#f-ssm_state', '32x128x128x2');
  await page.waitForFunction(() => document.querySelector('[data-error-for=ssm_state]')?.innerText.includes('has 4 factors'));
  assert.equal(await page.inputValue('#f-ssm_state'), '32x128x128x2');
  await screenshot(page, 'kv-hybrid');
});

test('a model from its GGUF header: the first bytes read, the fields filled, a bad file named and the form kept', async () => {
  const page = await newPage(browser);
  await open(page, '?layers=7&kv_heads=8&head_dim=128&seqs=4096');
  await page.getByTestId('gguf-import').locator('summary').click();
  // The bundled checkpoint (98 MB): its header is in the first 2 MiB.
  await page.getByTestId('gguf-file').setInputFiles(join(root, 'assets/SmolLM2-135M-Instruct.Q4_1.gguf'));
  await page.getByTestId('gguf-read').waitFor();
  assert.match(await text(page, 'gguf-read'), /the first 2,097,152 bytes \(2\.00 MiB\) of 98,362,432 /);
  assert.equal(await page.inputValue('#f-layers'), '30');
  assert.equal(await page.inputValue('#f-kv_heads'), '3');
  assert.equal(await page.inputValue('#f-head_dim'), '64');
  // 2 × 30 × 3 × 64 × 2 × 4,096 tokens.
  await page.waitForFunction(() => document.querySelector('[data-testid=exact-bytes]').innerText === '94,371,840 bytes');
  assert.match(await text(page, 'gguf-notes'), /134,515,008 parameters in 272 tensors/);
  // The link carries the fields, not the file.
  assert.match(page.url(), /layers=30&kv_heads=3&head_dim=64/);
  assert.match(page.url(), /weight_bytes=96576768/);
  // Not a GGUF: named, and the form keeps what it had.
  await page.getByTestId('gguf-file').setInputFiles({ name: 'notes.gguf', mimeType: 'application/octet-stream', buffer: Buffer.from('GGML is not GGUF, and this is neither') });
  await page.getByTestId('gguf-error').waitFor();
  assert.match(await text(page, 'gguf-error'), /^notes\.gguf: starts with "GGML", not the GGUF magic\. The form is unchanged\.$/);
  assert.equal(await page.inputValue('#f-layers'), '30');
  assert.deepEqual(page.problems, []);
  await screenshot(page, 'kv-gguf');
});

test('the vLLM reconciler: a /metrics scrape as a ledger, each difference attributed, a bad line named, never in the link', async () => {
  const page = await newPage(browser);
  await open(page, '?preset=llama-3.1-8b&seqs=1000,2000,3000,4000');
  const scrape = [
    '# TYPE vllm:cache_config_info gauge',
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="27000"} 1.0',
    'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 4.0',
    'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.0',
    'vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.0222222222',
    'vllm:num_preemptions_total{engine="0" 3',
  ].join('\n');
  await page.getByTestId('reconcile-text').fill(scrape);
  await page.getByTestId('reconcile-read').click();
  await page.getByTestId('reconcile-ledger').waitFor();
  const rows = (await page.getByTestId('reconcile-ledger').locator('tbody tr').allInnerTexts()).join('\n');
  // 63 + 125 + 188 + 250 blocks of 16 tokens need, 1 null block, 600 in use by the metrics: 27 blocks held once.
  assert.match(rows, /= blocks those requests need\t626\t1,312,817,152/);
  assert.match(rows, /null block vLLM reserves[^\n]*\t1\t/);
  assert.match(rows, /432 tokens of shared prefix\t−27\t−56,623,104\tprefix sharing/);
  assert.match(rows, /= blocks in use, by the metrics\t600\t/);
  assert.match(rows, /= the block pool vLLM allocated\t27,000\t56,623,104,000/);
  assert.match(await text(page, 'reconcile-skipped'), /line 6: a `\{` without its `\}` \(skipped; the other lines are kept\)/);
  // The ledger follows the form; the scrape never enters the link.
  await page.fill('#f-seqs', '1000,2000,3000,4400');
  await page.waitForFunction(() => /= blocks those requests need\t651\t/.test(document.querySelector('[data-testid=reconcile-ledger]')?.innerText ?? ''));
  assert.doesNotMatch(page.url(), /cache_config|kv_cache_usage|vllm%3A/);
  assert.deepEqual(page.problems, []);
  await screenshot(page, 'kv-reconcile');
});

test('typing updates figures and the URL (replaceState, no history entries)', async () => {
  const page = await newPage(browser);
  await open(page, '?layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4');
  const historyBefore = await page.evaluate(() => history.length);
  await page.fill('#f-layers', '40');
  await page.fill('#f-seqs', '2048,4096,8192x2');
  await page.selectOption('#f-kv_dtype', 'int4');
  // 2 × 40 × 8 × 128 × 0.5 × 22528 = 922,746,880 bytes.
  await page.waitForFunction(() => document.querySelector('[data-testid=exact-bytes]').innerText === '922,746,880 bytes');
  assert.equal(await text(page, 'formula'), '2 × 40 × 8 × 128 × 0.5 × (2048 + 4096 + 8192 × 2) = 922746880 bytes');
  const url = new URL(page.url());
  assert.equal(url.searchParams.get('layers'), '40');
  assert.equal(url.searchParams.get('seqs'), '2048,4096,8192x2');
  assert.equal(url.searchParams.get('kv_dtype'), 'int4');
  assert.equal(await page.evaluate(() => history.length), historyBefore);
  // The link reproduces the same numbers in a fresh page.
  const again = await newPage(browser);
  await open(again, url.search);
  assert.equal(await text(again, 'exact-bytes'), '922,746,880 bytes');
});

test('an invalid parameter is named inline; valid ones and the typed text survive a reload', async () => {
  const page = await newPage(browser);
  await open(page, '?layers=32&kv_heads=4&head_dim=128&seqs=8192x4&tp=abc', { expect: 'problem' });
  // No figures are invented for an invalid link.
  assert.equal(await page.getByTestId('logical-total').count(), 0);
  assert.match(await page.locator('[data-error-for=tp]').innerText(), /^tp: /);
  assert.equal(await page.inputValue('#f-kv_heads'), '4');
  assert.equal(await page.inputValue('#f-tp'), 'abc');
  assert.match(await text(page, 'problem'), /tp/);
  await page.fill('#f-layers', '0');
  await page.waitForFunction(() => document.querySelector('[data-error-for=layers]')?.innerText.includes('out of range'));
  await page.reload();
  await page.getByTestId('problem').waitFor();
  assert.equal(await page.inputValue('#f-layers'), '0');
  assert.equal(await page.inputValue('#f-tp'), 'abc');
  assert.match(await page.locator('[data-error-for=layers]').innerText(), /layers: 0 is out of range/);
  await screenshot(page, 'kv-invalid');
});

test('config.json import fills the fields and shows every assumption', async () => {
  const page = await newPage(browser);
  await open(page, '?seqs=4096x2');
  await page.getByTestId('config-import').locator('summary').click();
  const config = JSON.stringify({
    model_type: 'mistral', num_hidden_layers: 32, num_attention_heads: 32, hidden_size: 4096,
    num_key_value_heads: 8, sliding_window: 4096, torch_dtype: 'bfloat16',
    vocab_size: 32000, intermediate_size: 14336,
  });
  await page.getByTestId('config-text').fill(config);
  await page.getByTestId('config-import-button').click();
  await page.getByTestId('config-notes').locator('li').first().waitFor();
  const notes = await text(page, 'config-notes');
  assert.match(notes, /head_dim` is absent: d_head = hidden_size \/ num_attention_heads = 4096 \/ 32 = 128/);
  assert.match(notes, /assumed every layer slides/);
  assert.equal(await page.inputValue('#f-head_dim'), '128');
  assert.equal(await page.inputValue('#f-window'), '4096');
  assert.match(page.url(), /layer_types=slidingx32/);
  // A broken file gives a message and keeps the pasted text.
  await page.getByTestId('config-text').fill('{"num_hidden_layers": 2');
  await page.getByTestId('config-import-button').click();
  assert.match(await text(page, 'config-error'), /not valid JSON/);
  assert.equal(await page.getByTestId('config-text').inputValue(), '{"num_hidden_layers": 2');
  await screenshot(page, 'kv-import');
});

test('budget inversion, TP replication and the vLLM cross-check', async () => {
  const page = await newPage(browser);
  const log = 'GPU KV cache size: 491,008 tokens\nMaximum concurrency for 8,192 tokens per request: 59.94x';
  await open(page, `?preset=llama-3.1-8b&seqs=8192x4&gpu_gib=80&reserve=0.1&tp=16&vllm=${encodeURIComponent(log)}`);
  assert.match(await text(page, 'tensor-parallel'), /replicated/);
  assert.match(await text(page, 'tensor-parallel'), /TP 16 > 8 KV heads/);
  assert.ok(Number((await text(page, 'max-seqs')).replace(/,/g, '')) > 0);
  assert.match(await text(page, 'cross-check'), /491,008/);
  await screenshot(page, 'kv-budget');
});

test('embed widget: compact, no network beyond its own files, first load within 400 KB gzipped', async () => {
  const page = await newPage(browser, { viewport: { width: 720, height: 520 } });
  const sizes = recordSizes(page);
  await open(page, '?embed=kv&preset=qwen3-0.6b&seqs=4096x8');
  await page.waitForLoadState('networkidle');
  assert.equal(await page.locator('#f-gpu_gib').count(), 0, 'the widget is compact');
  assert.equal(await page.locator('main.embed').count(), 1);
  const total = sizes.reduce((a, s) => a + s.bytes, 0);
  const files = sizes.map((s) => new URL(s.url).pathname);
  assert.ok(files.every((f) => /\.(html|js|wasm|css|svg)$|\/$/.test(f)), files.join(' '));
  assert.ok(!files.some((f) => /gguf|router|worker/.test(f)), 'no router or model files');
  assert.ok(total <= 400 * 1024, `first load ${total} bytes`);
  await mkdir(outDir, { recursive: true });
  await writeFile(join(outDir, 'embed-first-load.json'), JSON.stringify({ total_bytes_gzip: total, files: sizes }, null, 2));
  console.log(`embed first load: ${(total / 1024).toFixed(1)} KiB gzipped over ${sizes.length} requests`);
  assert.deepEqual(page.blocked, []);
  await screenshot(page, 'kv-embed');
});

test('keyboard only: tab to an input, type, the figures follow', async () => {
  const page = await newPage(browser);
  await open(page, '?layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4');
  await page.focus('#f-preset');
  for (let i = 0; i < 20; i++) {
    await page.keyboard.press('Tab');
    if (await page.evaluate(() => document.activeElement?.id === 'f-kv_heads')) break;
  }
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'f-kv_heads');
  await page.keyboard.press('Control+A');
  await page.keyboard.type('16');
  await page.waitForFunction(() => document.querySelector('[data-testid=logical-total]').innerText === '8.00 GiB');
});

test('every page ships a Content-Security-Policy that refuses inline script, and runs under it', async () => {
  for (const [path, ready] of [['', 'logical-total'], ['?embed=kv', 'logical-total'], ['router/', 'model-load'], ['router/?embed=latency', 'latency-table']]) {
    const page = await newPage(browser);
    await page.goto(`${server.url}${path}`);
    await page.getByTestId(ready).first().waitFor();
    const policy = await page.locator('meta[http-equiv=Content-Security-Policy]').getAttribute('content');
    assert.match(policy, /script-src 'self' 'wasm-unsafe-eval';/, path);
    assert.match(policy, /worker-src 'self';/, path);
    assert.doesNotMatch(policy, /unsafe-inline|blob:|\*/, path);
    assert.equal(await page.locator('script:not([src])').count(), 0, `${path}: no inline script in the page`);
    assert.deepEqual(cspViolations, [], `${path}: the page runs under its policy`);
    // An inline script slipped into the page does not run, and the browser says why.
    const ran = await page.evaluate(() => {
      const script = document.createElement('script');
      script.textContent = 'window.injected = true';
      document.head.append(script);
      return window.injected === true;
    });
    assert.equal(ran, false, `${path}: an inline script ran`);
    // The report arrives asynchronously: waited for, not a fixed 200 ms, which a
    // busy machine outran (a report then landed in the next page's check). The
    // page is closed before the reports are taken, so none of its own can follow.
    const reported = Date.now() + 10_000;
    while (!cspViolations.some((v) => /script-src/.test(v)) && Date.now() < reported) await new Promise((ok) => setTimeout(ok, 50));
    await page.close();
    assert.ok(cspViolations.splice(0).some((v) => /script-src/.test(v)), `${path}: the refusal is reported`);
  }
});

test('a long session: 100 calculator links in one page, each right and none with an error', async () => {
  const page = await newPage(browser);
  const presets = ['qwen3-0.6b', 'llama-3.1-8b', 'deepseek-v3', 'gemma-3-27b', 'llama-3.1-70b'];
  const dtypes = ['bf16', 'fp8', 'fp16', 'int8'];
  for (let i = 0; i < 100; i++) {
    // Hand-computable links (2 × L × H × d × b × T × n) between preset ones.
    if (i % 2 === 0) {
      const [layers, heads, dim, tokens, seqs] = [1 + (i % 80), 1 + (i % 16), 64 * (1 + (i % 4)), 1024 * (1 + (i % 32)), 1 + (i % 8)];
      await open(page, `?layers=${layers}&kv_heads=${heads}&head_dim=${dim}&kv_dtype=bf16&seqs=${tokens}x${seqs}`);
      const bytes = 2 * layers * heads * dim * 2 * tokens * seqs;
      assert.equal(await text(page, 'exact-bytes'), `${bytes.toLocaleString('en-US')} bytes`, `link ${i}`);
    } else {
      await open(page, `?preset=${presets[i % presets.length]}&kv_dtype=${dtypes[i % dtypes.length]}&seqs=${4096 * (1 + (i % 8))}x${1 + (i % 4)}`);
      assert.match(await text(page, 'logical-total'), /^[\d.]+ [KMGT]iB$/, `link ${i}`);
    }
  }
  assert.deepEqual(page.problems, []);
  assert.deepEqual(page.blocked, []);
});

test('capacity from a length distribution: pasted lengths, a bad line named and kept, and the OOD176 example', async () => {
  const page = await newPage(browser);
  await open(page, '?preset=llama-3.1-8b&gpu_gib=80');
  const query = new URL(page.url()).search;
  // Pasted lengths never enter the link.
  // A line that does not read is named, and the text stays as typed.
  const bad = 'prompt_tokens,completion_tokens\n1200,300\n8000,lots\n';
  await page.getByTestId('dist-text').fill(bad);
  await page.getByTestId('dist-read').click();
  assert.equal(await text(page, 'dist-problem'), 'the pasted lengths: line 3: completion_tokens `lots` is not a number');
  assert.equal(await page.getByTestId('dist-text').inputValue(), bad);
  // Two lengths: the table's rows, exact. Llama 3.1 8B keeps 128 KiB a token in bf16.
  await page.getByTestId('dist-text').fill('prompt_tokens,completion_tokens\n1200,300\n8000,450\n');
  await page.getByTestId('dist-read').click();
  await page.getByTestId('dist-table').waitFor();
  const budget = await text(page, 'kv-budget');
  const cells = await page.locator('[data-testid=dist-table] tbody tr').allInnerTexts();
  assert.deepEqual(cells.map((r) => r.split('\t').slice(0, 3)), [
    ['mean', '4,975', '623.00 MiB'],
    ['p50', '1,500', '188.00 MiB'],
    ['p95', '8,450', '1.03 GiB'],
    ['p99', '8,450', '1.03 GiB'],
    ['max', '8,450', '1.03 GiB'],
  ]);
  assert.match(await text(page, 'dist-lines'), new RegExp(`2 sequences: mean prompt 4,600 and answer 375 tokens; .* K/V budget of ${budget.replace('.', '\\.')}`));
  // The built-in example: OOD176's rows divided into mean calls, failed runs left out.
  await page.getByTestId('dist-example').click();
  await page.waitForFunction(() => /1,002 sequences/.test(document.querySelector('[data-testid=dist-lines]')?.textContent ?? ''));
  assert.match(await text(page, 'dist-lines'), /1,002 sequences \(each row's mean call: totals ÷ calls\), 406 rows without tokens skipped \(failed runs\)/);
  const fits = async (label) => Number((await page.locator(`[data-testid=dist-table] td[data-label=${label}]`).innerText()).replace(/,/g, ''));
  assert.ok((await fits('mean')) > (await fits('p99')) && (await fits('p99')) >= (await fits('max')), 'the tail fits fewer');
  assert.equal(await page.locator('[data-testid=dist-plot] svg polyline').count(), 1);
  // The example is in the link, and a link carrying it sizes it on opening.
  const shared = new URL(page.url());
  assert.equal(shared.searchParams.get('lengths'), 'ood176');
  const again = await newPage(browser);
  await open(again, shared.search);
  await again.waitForFunction(() => /1,002 sequences/.test(document.querySelector('[data-testid=dist-lines]')?.textContent ?? ''));
  // Pasted lengths are not: sizing them takes the example out of the link.
  await again.getByTestId('dist-text').fill('input,output\n100,10\n');
  await again.getByTestId('dist-read').click();
  await again.waitForFunction(() => /^1 sequence:/.test(document.querySelector('[data-testid=dist-lines]')?.textContent ?? ''));
  assert.equal(new URL(again.url()).search, query);
  await screenshot(page, 'kv-distribution');
});
