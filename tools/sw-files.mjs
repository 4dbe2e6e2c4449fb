// Writes pkg/sw.js from www/sw.js with the service worker's file lists and build digest
// (run by scripts/build-site.sh once every part of the site is built): every
// file of the built site but the checkpoints and sw.js itself, grouped by
// the page that needs it (`router/…` for the router page, the rest for the
// calculator, and the root files both use, for both), an index.html
// listed as its folder.
//
//   node tools/sw-files.mjs [pkg]

import { readdir, readFile, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { join, relative, sep } from 'node:path';

const site = process.argv[2] ?? 'pkg';

async function walk(dir) {
  const out = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await walk(path)));
    else out.push(path);
  }
  return out;
}

const files = (await walk(site))
  .map((path) => relative(site, path).split(sep).join('/'))
  .filter((path) => !path.endsWith('.gguf') && path !== 'sw.js')
  .sort();
const digest = createHash('sha256');
const groups = { calculator: [], router: [] };
for (const path of files) {
  digest.update(path).update(await readFile(join(site, path)));
  const url = path.endsWith('index.html') ? path.slice(0, -'index.html'.length) || './' : path;
  groups[path.startsWith('router/') ? 'router' : 'calculator'].push(url);
}
// Both pages use these from the site root: the registration module their
// boot.js imports, and the icon.
groups.router.push('offline.js', 'favicon.svg');
const build = digest.digest('hex').slice(0, 16);
// From the source (www/sw.js), so running this twice gives the same file.
const template = await readFile(new URL('../www/sw.js', import.meta.url), 'utf8');
await writeFile(join(site, 'sw.js'), template.replace("'__BUILD__'", `'${build}'`).replace('__FILES__', JSON.stringify(groups)));
console.log(`sw.js: build ${build}, ${groups.calculator.length} calculator files, ${groups.router.length} router files`);
