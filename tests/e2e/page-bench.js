// Drives the router page's own bench in a browser page: load the bundled
// model, run the protocol, save the page's JSON export. Shared by
// bench-browser.mjs and the peer bench, so both measure the product itself.

/** Runs the page's bench at `base` (the site root) and saves its export to `out`; returns the report. */
export async function runPageBench(page, base, { lengths, warmup, iterations, precision, out, log = () => {} }) {
  const chosen = precision ? `&precision=${precision}` : '';
  await page.goto(`${base}router/#router&lengths=${lengths}&warmup=${warmup}&iters=${iterations}${chosen}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=model-load]') && !document.querySelector('[data-testid=model-load]').disabled, null, { timeout: 120_000 });
  await page.getByTestId('model-load').click();
  await page.waitForFunction(() => ['ready', 'failed'].includes(document.querySelector('[data-testid=model-status]')?.textContent), null, { timeout: 600_000 });
  if ((await page.getByTestId('model-status').textContent()) !== 'ready') throw new Error(await page.getByTestId('router-alert').innerText());
  log(await page.getByTestId('bench-estimate').textContent());
  await page.getByTestId('bench-run').click();
  let last = '';
  const timer = setInterval(async () => {
    const stage = await page.getByTestId('bench-stage').textContent().catch(() => null);
    if (stage && stage !== last) log(stage);
    last = stage ?? last;
  }, 10_000);
  try {
    await page.getByTestId('bench-table').waitFor({ timeout: 4 * 3600_000 });
  } finally {
    clearInterval(timer);
  }
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('bench-export').click()]);
  await download.saveAs(out);
  return JSON.parse(await (await import('node:fs/promises')).readFile(out, 'utf8'));
}

/** Measures the page's GEMM probe (needs a loaded model); returns GFLOP/s. */
export async function pageGemmProbe(page) {
  await page.getByTestId('gemm-probe').click();
  await page.waitForFunction(() => /GFLOP\/s \(best of/.test(document.querySelector('[data-testid=gemm-line]')?.textContent ?? ''), null, { timeout: 300_000 });
  const line = await page.getByTestId('gemm-line').textContent();
  return { line, gflops: Number(line.match(/: ([\d.]+) GFLOP\/s \(best of/)[1]) };
}
