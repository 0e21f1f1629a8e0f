#!/usr/bin/env node
// run.sh's helpers (loopback only):
//   node bench.js table-items ENDPOINT TABLE      items in the table (0 if it does not exist)
//   node bench.js proxy-reset PORT | proxy-stats PORT
//   node bench.js gather-cost EXPLAIN_FILE        gather's --explain as JSON (query part + statistics reads)
//   node bench.js markdown RESULTS.jsonl          the results table (medians over repeats)
'use strict';

const http = require('http');
const fs = require('fs');

function proxy(port, method, path) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

async function tableItems(endpoint, table) {
  const { DynamoDBClient, DescribeTableCommand } = require('@aws-sdk/client-dynamodb');
  const c = new DynamoDBClient({ endpoint, region: process.env.AWS_REGION || 'us-east-1' });
  try {
    const d = await c.send(new DescribeTableCommand({ TableName: table }));
    return d.Table.ItemCount || 0;
  } catch (e) {
    if (e.name === 'ResourceNotFoundException') return 0;
    throw e;
  } finally {
    c.destroy();
  }
}

function gatherCost(file) {
  const t = fs.readFileSync(file, 'utf8');
  const num = (re) => { const m = re.exec(t); return m ? Number(m[1]) : null; };
  const out = {
    requests: num(/^\s*requests:\s+(\d+)/m),
    scanned: num(/^\s*scanned:\s+(\d+) items/m),
    returned: num(/^\s*returned:\s+(\d+) items/m),
    rcu: num(/^\s*RCU:\s+([\d.]+)/m),
    query_s: num(/^\s*wall:\s+([\d.]+) s/m),
    stats_requests: num(/statistics read: (\d+) requests/) || 0,
    stats_rcu: num(/statistics read: \d+ requests, ([\d.]+) RCU/) || 0,
  };
  const src = /^\s*source:\s+projection (\S+)/m.exec(t);
  const rollup = /^\s*rollup:\s+(\S+)/m.exec(t);
  out.source = src ? `${src[1]}, ${rollup ? rollup[1] : '?'}` : null;
  for (const k of ['requests', 'scanned', 'rcu', 'query_s']) {
    if (out[k] === null) throw new Error(`gather's --explain in ${file} has no ${k} line`);
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

function fmt(x, d) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  return x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

function markdown(file) {
  const rows = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const reports = [...new Set(rows.map((r) => r.report))];
  const paths = [...new Set(rows.map((r) => r.path))];
  const gatherers = [...new Set(rows.map((r) => r.gatherer))];
  const lines = [];
  lines.push('| report | gatherer | path | wall s | query s | requests | items read | items returned | MB returned | RCU | speedup, wall | speedup, query s | speedup, RCU |');
  lines.push('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  const summary = [];
  for (const report of reports) {
    for (const path of paths) {
      const agg = {};
      for (const g of gatherers) {
        const rs = rows.filter((r) => r.report === report && r.path === path && r.gatherer === g);
        if (!rs.length) continue;
        agg[g] = {
          wall: median(rs.map((r) => r.wall_s)),
          query: median(rs.map((r) => r.query_s)),
          requests: median(rs.map((r) => r.requests)),
          scanned: median(rs.map((r) => r.scanned)),
          returned: median(rs.map((r) => r.returned)),
          rcu: median(rs.map((r) => r.rcu)),
          mb: rs[0].proxy ? median(rs.map((r) => r.proxy.bytes_out / 1e6)) : null,
          n: rs.length,
          source: rs[0].source,
        };
      }
      const peers = Object.keys(agg).filter((g) => g.startsWith('peer'));
      const bestWall = Math.min(...peers.map((g) => agg[g].wall));
      const bestRcu = Math.min(...peers.map((g) => agg[g].rcu));
      const bestQuery = Math.min(...peers.map((g) => agg[g].query));
      for (const g of Object.keys(agg)) {
        const a = agg[g];
        const isGather = g === 'gather';
        const name = isGather && a.source ? `gather (${a.source})` : g;
        const sw = isGather ? `**${fmt(bestWall / a.wall, 1)}×**` : '';
        const sq = isGather ? `**${fmt(bestQuery / a.query, 1)}×**` : '';
        const sr = isGather ? `**${fmt(bestRcu / a.rcu, 1)}×**` : '';
        lines.push(`| ${report} | ${name} | ${path} | ${fmt(a.wall, 3)} | ${fmt(a.query, 3)} | ${fmt(a.requests, 0)} | ${fmt(a.scanned, 0)} | ${fmt(a.returned, 0)} | ${a.mb === null ? '' : fmt(a.mb, 2)} | ${fmt(a.rcu, 1)} | ${sw} | ${sq} | ${sr} |`);
        if (isGather) summary.push({ report, path, wall: bestWall / a.wall, query: bestQuery / a.query, rcu: bestRcu / a.rcu });
      }
    }
  }
  lines.push('');
  lines.push('Target ≥ 10× the better peer on wall time and on RCU:');
  lines.push('');
  lines.push('| report | path | wall (process) | query s (own clocks) | RCU |');
  lines.push('|---|---|---:|---:|---:|');
  for (const s of summary) {
    const v = (x) => `${fmt(x, 1)}× ${x >= 10 ? 'met' : '**missed**'}`;
    lines.push(`| ${s.report} | ${s.path} | ${v(s.wall)} | ${v(s.query)} | ${v(s.rcu)} |`);
  }
  process.stdout.write(lines.join('\n') + '\n');
}

async function main() {
  const [cmd, a, b] = process.argv.slice(2);
  switch (cmd) {
    case 'table-items': console.log(await tableItems(a, b)); break;
    case 'proxy-reset': await proxy(Number(a), 'POST', '/__proxy/reset'); break;
    case 'proxy-stats': console.log(await proxy(Number(a), 'GET', '/__proxy/stats')); break;
    case 'gather-cost': console.log(JSON.stringify(gatherCost(a))); break;
    case 'markdown': markdown(a); break;
    default: throw new Error(`unknown command ${cmd}`);
  }
}

main().catch((e) => { console.error(`bench.js: ${e && e.stack ? e.stack : e}`); process.exit(1); });
