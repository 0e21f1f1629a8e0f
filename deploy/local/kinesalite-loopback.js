#!/usr/bin/env node
// Runs kinesalite (in memory) bound to 127.0.0.1 only. kinesalite's own CLI
// calls server.listen(port) without a host, i.e. on all interfaces.
//
// Usage (up.sh does this):
//   node kinesalite-loopback.js KINESALITE_PACKAGE_DIR PORT [CREATE_STREAM_MS] [SHARD_LIMIT]
'use strict';

const HOST = '127.0.0.1';
const [pkgDir, portArg, createMsArg, shardLimitArg] = process.argv.slice(2);
const port = Number(portArg);
if (!pkgDir || !Number.isInteger(port) || port < 1 || port > 65535) {
  console.error('usage: kinesalite-loopback.js KINESALITE_PACKAGE_DIR PORT [CREATE_STREAM_MS] [SHARD_LIMIT]');
  process.exit(2);
}

const kinesalite = require(pkgDir);
const ms = Number(createMsArg || 500);
const server = kinesalite({
  createStreamMs: ms,
  deleteStreamMs: ms,
  updateStreamMs: ms,
  shardLimit: Number(shardLimitArg || 50),
});

server.on('error', (err) => {
  console.error(`kinesalite: cannot listen on ${HOST}:${port}: ${err.message}`);
  process.exit(1);
});
server.listen(port, HOST, () => {
  const a = server.address();
  console.log(`kinesalite listening at http://${a.address}:${a.port} (in memory)`);
});

// In memory only: nothing to flush, so stop at once.
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => process.exit(0));
}
