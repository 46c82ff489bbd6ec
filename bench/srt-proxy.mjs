#!/usr/bin/env node
// srt's own HTTP proxy (the sandbox-runtime npm package), alone, for cc-bench egress to
// compare against: `node bench/srt-proxy.mjs <the package's directory>` prints `port=N`
// and serves on 127.0.0.1 until killed. Its filter admits 127.0.0.1, the bench's
// server; the tunnelling is srt's, unchanged. srt's CLI would also start its sandbox,
// which needs socat and ripgrep and adds two socat hops: this measures the proxy only.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const pkg = process.argv[2];
if (!pkg) {
  console.error('usage: node srt-proxy.mjs <sandbox-runtime package directory>');
  process.exit(2);
}
const { createHttpProxyServer } = await import(pathToFileURL(join(pkg, 'dist/sandbox/http-proxy.js')).href);
const server = createHttpProxyServer({ filter: (_port, host) => host === '127.0.0.1' });
await new Promise((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
console.log(`port=${server.address().port}`);
process.on('SIGTERM', () => process.exit(0));
