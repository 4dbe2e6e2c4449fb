// End-to-end tests of the router page's routing-quality card: the page opens
// with a real task (a first Decide works), the measured study (bench-decide
// --quality) is shown only when asked, shared by link, and re-run in this
// browser on tasks the user picks, against the native study's decisions.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { newPage, screenshot, root, loadBundled, server, browser, useSite, openShared } from './harness.js';

const STUDY = JSON.parse(await readFile(join(root, 'reports/router-quality.cpu.json'), 'utf8'));

useSite();

const row = (page, policy) => page.locator(`[data-testid=quality-row][data-policy="${policy}"]`);

test('a first visitor decides a real task, then opens, shares and re-runs the quality study', async () => {
  const page = await newPage(browser);
  const from = server.served.length;
  await page.goto(`${server.url}router/`);
  // The conversation opens with a real OOD176 task, and the fragment stays bare.
  assert.match(await page.getByTestId('conv-user').inputValue(), /^Subclassed SkyCoord gives misleading attribute access message/);
  assert.equal(new URL(page.url()).hash, '#router');
  assert.ok(!server.served.slice(from).some((p) => /quality\.json|ood176|head\./.test(p)), 'nothing of the study before it is asked for');
  await loadBundled(page);
  await page.getByTestId('decide-button').click();
  await page.getByTestId('decide-result').waitFor({ timeout: 120_000 });
  assert.equal(await page.locator('[data-testid=decide-row]').count(), 8, 'the first Decide answers');
  assert.equal(await page.getByTestId('router-alert').count(), 0);

  // The measured study, fetched on request.
  await page.getByTestId('quality-show').click();
  await page.getByTestId('quality-study').waitFor();
  const quality = STUDY.quality;
  assert.match(await page.getByTestId('quality-provenance').innerText(), new RegExp(`Checkpoint ${STUDY.provenance.checkpoint_id} \\+ ${quality.head.id}.*split OOD176, 176 tasks \\(406 failed runs\\).*5-fold CV × 5 seeds`));
  // Every backbone's study side by side, from each one's own report.
  const GEMMA = JSON.parse(await readFile(join(root, 'reports/router-quality.gemma3.cpu.json'), 'utf8'));
  await page.locator('[data-testid=backbone-row]').nth(1).waitFor();
  assert.equal(await page.locator('[data-testid=backbone-row]').count(), 2);
  const gemmaHead = GEMMA.quality.rows.find((r) => r.subset === 'all' && r.policy === 'router, trained head (CV), quality');
  assert.equal(await page.locator(`[data-testid=backbone-row][data-checkpoint="${GEMMA.provenance.checkpoint_id}"]`).getAttribute('data-head-quality'), gemmaHead.resolved.mean.toFixed(1));
  assert.match(await page.getByTestId('backbone-table').innerText(), new RegExp(`${GEMMA.quality.head.id}: .*reads `));
  // What the study shows, said plainly from its own rows and curves.
  const verdicts = await page.locator('[data-testid=quality-verdicts] li').allTextContents();
  // One line per curve, two more, and whether predicting each task's cost moves the head's curve.
  const chosenInside = quality.rows.some((r) => r.policy.includes('truncation chosen inside'));
  assert.equal(verdicts.length, 3 + quality.curves.length + (chosenInside ? 1 : 0), verdicts.join('\n'));
  assert.match(verdicts.join('\n'), /Per-task cost prediction (does not move|moves) the curve/);
  assert.match(verdicts.join('\n'), /always gpt-5\.4 \(113 at \$18\.27\)/);
  const oracle = quality.rows.find((r) => r.subset === 'all' && r.family === 'oracle');
  assert.equal(await row(page, oracle.policy).getAttribute('data-resolved'), oracle.resolved.mean.toFixed(1));
  const head = quality.rows.find((r) => r.subset === 'all' && r.policy === 'router, trained head (CV), quality');
  assert.equal(await row(page, head.policy).getAttribute('data-resolved'), head.resolved.mean.toFixed(1));
  assert.equal(await page.locator('[data-testid=quality-row]').count(), quality.rows.filter((r) => r.subset === 'all').length);
  await page.getByTestId('quality-subset').selectOption('swebench112');
  assert.equal(await row(page, oracle.policy).getAttribute('data-resolved'), '85.0');
  assert.match(await page.getByTestId('published-note').innerText(), /\$116\.49/);
  assert.equal(await page.locator('[data-testid=quality-plot] svg').count(), 1);
  if (quality.truncation.length) {
    assert.equal(await page.locator('[data-testid=truncation-table] tbody tr').count(), quality.truncation.reduce((n, p) => n + p.rows.length, 0));
    assert.equal(await page.locator('[data-testid=truncation-plot] svg').count(), 1);
  }
  // The head's calibration and its doubt, out of fold, as the report has them.
  assert.equal(await page.locator('[data-testid=calibration-row]').count(), quality.calibration.length);
  assert.equal(quality.calibration.length, 8, 'a calibration per candidate');
  assert.equal(await page.locator('[data-testid=reliability-plot] svg').count(), 1);
  assert.equal(await page.locator('[data-testid=doubt-row]').count(), quality.doubt.rows.length);
  assert.equal(await page.locator('[data-testid=cost-prediction-row]').count(), 8, 'a cost model per candidate');
  // The published rows of other routers, with the protocol difference said.
  assert.equal(await page.locator('[data-testid=published-row][data-router=ACRouter]').getAttribute('data-resolved'), '129.0');
  assert.match(await page.getByTestId('published-protocol').innerText(), /trained on the dataset's in-distribution split/);
  await screenshot(page, 'router-quality');

  // Re-run in this browser: the first two of the newer 64, against the
  // native study's decisions on the same tasks.
  await page.getByTestId('browser-quality-count').fill('0');
  assert.match(await page.locator('.browser-quality .field-error').innerText(), /`0` is not a number of tasks from 1 to 176/);
  assert.ok(await page.getByTestId('browser-quality-run').isDisabled());
  await page.getByTestId('browser-quality-count').fill('2');
  await page.getByTestId('browser-quality-run').click();
  await page.getByTestId('browser-quality-done').waitFor({ timeout: 300_000 });
  assert.match(await page.getByTestId('browser-quality-done').innerText(), new RegExp(`checkpoint gguf-b179c952 \\+ ${quality.head.id}`));
  const rows = await page.locator('[data-testid=browser-quality-row]').evaluateAll((rs) => rs.map((r) => ({ same: Number(r.dataset.same), tasks: Number(r.dataset.tasks), cells: [...r.querySelectorAll('td')].map((c) => c.textContent) })));
  assert.equal(rows.length, 6, 'similarity and head, three modes each');
  for (const r of rows) {
    assert.equal(r.tasks, 2);
    assert.equal(r.same, 2, `the browser picks what native picked: ${JSON.stringify(r)}`);
    assert.equal(r.cells[0], r.cells[1], 'same resolved and cost as the native study');
  }
  assert.match(await page.getByTestId('browser-quality-latency').innerText(), /Prefilling decide per task, median: [\d.]+ (ms|s) here, [\d.]+ (ms|s) in the native run/);

  // The study travels in a link and opens read-only, starting nothing.
  await page.getByTestId('quality-share').click();
  const link = await page.getByTestId('quality-share-link').getAttribute('href');
  const { viewer, fetched } = await openShared(link);
  await viewer.getByTestId('quality-study').waitFor();
  assert.equal(await row(viewer, head.policy).getAttribute('data-resolved'), head.resolved.mean.toFixed(1));
  assert.ok(!fetched().some((p) => /router_worker|\.gguf|quality\.json/.test(p)), fetched().join(' '));
  await viewer.context().close();
  await page.context().close();
});
