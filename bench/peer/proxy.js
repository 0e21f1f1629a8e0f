#!/usr/bin/env node
// A loopback delay proxy for DynamoDB (Local): listens on 127.0.0.1 only,
// holds every request for --delay-ms (default 8) before forwarding it to
// --target (which must be a 127.0.0.1 URL), and meters what passes through
// it, the same way for every client: requests per operation, items
// (Count / ScannedCount) and the ConsumedCapacity the responses carry (only
// present when the client asked for it with ReturnConsumedCapacity).
//
//   node proxy.js --port 18034 --target http://127.0.0.1:18030 [--delay-ms 8]
//
// Control (answered by the proxy itself, never forwarded):
//   GET  /__proxy/stats   the meter as JSON
//   POST /__proxy/reset   zero the meter
'use strict';

const http = require('http');
const zlib = require('zlib');


function parseArgs(argv) {
  const out = { port: 18034, target: 'http://127.0.0.1:18030', delayMs: 8 };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--port') { out.port = Number(v); i++; }
    else if (a === '--target') { out.target = v; i++; }
    else if (a === '--delay-ms') { out.delayMs = Number(v); i++; }
    else { throw new Error(`unknown argument ${a}`); }
  }
  return out;
}

const args = parseArgs(process.argv);
const target = new URL(args.target);
if (target.hostname !== '127.0.0.1' || target.protocol !== 'http:') {
  console.error(`proxy: --target must be http://127.0.0.1:PORT, got ${args.target}`);
  process.exit(2);
}
if (!(args.delayMs >= 0)) {
  console.error('proxy: --delay-ms must be >= 0');
  process.exit(2);
}

const upstream = new http.Agent({ keepAlive: true, maxSockets: 256 });

function zero() {
  return { requests: 0, by_op: {}, items: 0, scanned: 0, rcu: 0, wcu: 0, bytes_out: 0, errors: 0 };
}
let meter = zero();

// The meter reads the response's top-level numbers with a regex rather than
// JSON.parse: a page of items can be a megabyte, and the proxy must not
// charge big responses more than the delay it promises. DynamoDB's JSON
// wraps every item attribute in a type ({"N": ...}), so a bare number after
// "Count", "ScannedCount" or "CapacityUnits" is the response's own.
function meterResponse(op, headers, body) {
  meter.requests++;
  meter.by_op[op] = (meter.by_op[op] || 0) + 1;
  meter.bytes_out += body.length;
  let buf = body;
  try {
    const enc = (headers['content-encoding'] || '').toLowerCase();
    if (enc === 'gzip') buf = zlib.gunzipSync(body);
    else if (enc === 'deflate') buf = zlib.inflateSync(body);
  } catch (_) {
    return;
  }
  const text = buf.toString('latin1');
  const num = (re) => { const m = re.exec(text); return m ? Number(m[1]) : 0; };
  meter.items += num(/"Count":\s*(\d+)/);
  meter.scanned += num(/"ScannedCount":\s*(\d+)/);
  const read = /^(Query|Scan|GetItem|BatchGetItem|TransactGetItems)$/.test(op);
  const units = num(/"CapacityUnits":\s*([\d.]+)/);
  if (read) meter.rcu += units; else meter.wcu += units;
  if (/"__type":/.test(text.slice(0, 200))) meter.errors++;
}

const server = http.createServer((req, res) => {
  if (req.url.startsWith('/__proxy/')) {
    req.resume();
    if (req.method === 'GET' && req.url === '/__proxy/stats') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(meter));
    } else if (req.method === 'POST' && req.url === '/__proxy/reset') {
      meter = zero();
      res.writeHead(204);
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const op = String(req.headers['x-amz-target'] || 'unknown').replace(/^DynamoDB_\d+\./, '');
    setTimeout(() => {
      const headers = { ...req.headers, host: target.host };
      const up = http.request({
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers,
        agent: upstream,
      }, (upRes) => {
        // Streamed back as it arrives (no store-and-forward), and metered.
        res.writeHead(upRes.statusCode, upRes.headers);
        const out = [];
        upRes.on('data', (c) => { out.push(c); res.write(c); });
        upRes.on('end', () => {
          res.end();
          meterResponse(op, upRes.headers, Buffer.concat(out));
        });
        upRes.on('error', () => res.destroy());
      });
      up.on('error', (e) => {
        meter.errors++;
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`proxy: upstream error: ${e.message}`);
      });
      up.end(body);
    }, args.delayMs);
  });
});
server.keepAliveTimeout = 60000;
server.listen(args.port, '127.0.0.1', () => {
  console.error(`proxy: 127.0.0.1:${args.port} -> ${args.target}, +${args.delayMs} ms per request`);
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { server.close(); upstream.destroy(); process.exit(0); });
}
