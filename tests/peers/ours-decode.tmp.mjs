import { serve } from '../../tools/static-server.mjs';
import { launch, newPage } from '../e2e/harness.js';
const sites = { old: '/tmp/s/pkg.old', new: '/work/main/pkg' };
const rounds = Number(process.env.ROUNDS || 2);
const builds = (process.env.BUILDS || 'threads,single-thread').split(',');
const browser = await launch();
try {
  for (let r = 0; r < rounds; r++) {
    for (const name of r % 2 ? ['new', 'old'] : ['old', 'new']) {
      for (const build of builds) {
        const server = await serve(sites[name], 0, { crossOriginIsolated: build === 'threads' });
        const page = await newPage(browser);
        await page.goto(`${server.url}router/#router&precision=int8`);
        await page.waitForFunction(() => document.querySelector('[data-testid=model-load]') && !document.querySelector('[data-testid=model-load]').disabled, null, { timeout: 120_000 });
        await page.getByTestId('model-load').click();
        await page.waitForFunction(() => ['ready', 'failed'].includes(document.querySelector('[data-testid=model-status]')?.textContent), null, { timeout: 600_000 });
        await page.getByTestId('decode-contexts').fill('256,1024');
        await page.getByTestId('decode-batches').fill('1,4,8');
        await page.getByTestId('decode-batch-context').fill('256');
        await page.getByTestId('decode-steps').fill('32');
        await page.getByTestId('decode-run').click();
        const report = page.getByTestId('decode-speed');
        await report.waitFor({ timeout: 3600_000 });
        console.log(`=== round ${r + 1} ${name} ${build}\n${await report.textContent()}`);
        await page.context().close();
        await server.close?.();
      }
    }
  }
} finally {
  await browser.close();
}
