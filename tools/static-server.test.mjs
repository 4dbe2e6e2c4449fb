// The static server's own tests (node's test runner: `node --test tools/`):
// what it refuses to serve, and that it compresses each file once per version.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { mkdtemp, mkdir, writeFile, utimes, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { serve, isInside } from './static-server.mjs';

/** A raw GET: the path is sent as written (a fetch would normalise `..` and `%2f` away before sending). */
function get(url, path, headers = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((ok, fail) => {
    const req = request({ hostname, port, path, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => ok({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', fail);
    req.end();
  });
}

async function site() {
  const root = await mkdtemp(join(tmpdir(), 'static-server-'));
  await mkdir(join(root, 'pkg', 'router'), { recursive: true });
  await mkdir(join(root, 'pkg-old'));
  await mkdir(join(root, 'peers'));
  await mkdir(join(root, 'peers-private'));
  await writeFile(join(root, 'pkg', 'index.html'), '<!doctype html><p>site</p>');
  await writeFile(join(root, 'pkg', 'router', 'index.html'), 'router page');
  await writeFile(join(root, 'pkg', 'app.js'), 'console.log("app");'.repeat(200));
  await writeFile(join(root, 'pkg-old', 'secret.txt'), 'a sibling folder sharing the prefix');
  await writeFile(join(root, 'peers', 'peer.html'), 'peer page');
  await writeFile(join(root, 'peers-private', 'secret.txt'), 'a sibling of the mount');
  await writeFile(join(root, 'outside.txt'), 'above the root');
  return root;
}

test('isInside takes the folder and what lies below it, not a sibling sharing its prefix', () => {
  assert.ok(isInside('/srv/pkg', '/srv/pkg'));
  assert.ok(isInside('/srv/pkg', '/srv/pkg/router/index.html'));
  assert.ok(!isInside('/srv/pkg', '/srv/pkg-old/secret.txt'));
  assert.ok(!isInside('/srv/pkg', '/srv/outside.txt'));
});

test('a sibling folder, `..` and a mount\'s sibling are refused; the site and the mount are served', async () => {
  const root = await site();
  const server = await serve(join(root, 'pkg'), 0, { mounts: { '/peers/': join(root, 'peers') } });
  try {
    for (const path of ['/..%2fpkg-old/secret.txt', '/..%2f..%2fpkg-old%2fsecret.txt', '/..%2foutside.txt', '/%2e%2e%2foutside.txt', '/peers/..%2fpeers-private/secret.txt', '/peers/..%2f..%2foutside.txt']) {
      const res = await get(server.url, path);
      assert.equal(res.status, 404, `${path} was answered ${res.status}: ${res.body}`);
      assert.ok(!res.body.toString().includes('secret') && !res.body.toString().includes('above'), path);
    }
    assert.equal((await get(server.url, '/')).body.toString(), '<!doctype html><p>site</p>');
    assert.equal((await get(server.url, '/router')).status, 301);
    assert.equal((await get(server.url, '/router/')).body.toString(), 'router page');
    assert.equal((await get(server.url, '/peers/peer.html')).body.toString(), 'peer page');
  } finally {
    await server.close();
    await rm(root, { recursive: true });
  }
});

test('gzip is computed once per file and modification time, and follows a change', async () => {
  const root = await site();
  const server = await serve(join(root, 'pkg'));
  try {
    const gz = { 'accept-encoding': 'gzip' };
    // A whole-second modification time, so putting it back below is exact.
    const file = join(root, 'pkg', 'app.js');
    const then = new Date(1_700_000_000_000);
    await utimes(file, then, then);
    const first = await get(server.url, '/app.js', gz);
    assert.equal(first.headers['content-encoding'], 'gzip');
    assert.equal(Number(first.headers['content-length']), first.body.length);
    assert.equal(gunzipSync(first.body).toString(), 'console.log("app");'.repeat(200));
    const plain = await get(server.url, '/app.js');
    assert.equal(plain.headers['content-encoding'], undefined);
    assert.equal(plain.body.toString(), 'console.log("app");'.repeat(200));
    // The cache is keyed by modification time and size: a file rewritten
    // with other bytes of the same length, its time put back, is still
    // answered from the cache (proof that nothing was compressed again).
    await writeFile(file, 'console.log("xyz");'.repeat(200));
    await utimes(file, then, then);
    assert.equal(gunzipSync((await get(server.url, '/app.js', gz)).body).toString(), 'console.log("app");'.repeat(200));
    // A new version (new content and modification time): compressed again.
    await writeFile(file, 'console.log("new");');
    const later = new Date(Date.now() + 5_000);
    await utimes(file, later, later);
    assert.equal(gunzipSync((await get(server.url, '/app.js', gz)).body).toString(), 'console.log("new");');
  } finally {
    await server.close();
    await rm(root, { recursive: true });
  }
});
