#!/usr/bin/env node
// The GSI write-scaling article's Appendix 1 gatherer (a Node.js scatter-gather reader:
// `async.mapLimit(range(0, 100), 20, query-per-scatter-prefix)`), ported to
// the AWS SDK v3 and made correct, as a peer for `gather`:
//
// - it reads EVERY page of every query (the seed read only the first 1 MB
//   page of each prefix: it followed no LastEvaluatedKey);
// - it reads Zigzag's base items (every dimension: the full cross product,
//   like the seed's table), partition key `{prefix:03}#{rollup}#{bin}`, one
//   query per prefix and partition time bin, and aggregates in JS into the
//   same report `gather` prints.
//
// Two variants (--variant):
//   plain   KeyConditionExpression pk = :pk only; the window and the
//           --where filters are applied in JS (the seed's way);
//   filter  the same query with a FilterExpression on the bucket start `t`
//           and the --where dimensions: DynamoDB drops the other items
//           before returning the page. It is billed on the items READ, so
//           its RCU equal plain's; it returns fewer bytes.
//
// Items carry their bucket start (`t`, ms) and their dimension values as
// attributes (model/src/keys.rs), so the peer needs no Z-address decoding.
//
// Usage:
//   node gatherer.js --endpoint http://127.0.0.1:18030 --table T --kind totals|timeseries|top|ratios \
//     --from ISO --to ISO --rollup minute|day [--step 5m] [--group-by FIELD] [--where FIELD=VALUE]... \
//     [--by ctr|MEASURE] [-n 20] [--prefixes 100] [--concurrency 20] [--variant plain|filter] [--out FILE]
// Prints one JSON line of what it cost: wall seconds, requests, items read
// (ScannedCount) and returned (Count), bytes, RCU (ReturnConsumedCapacity
// TOTAL, as DynamoDB reported it).
'use strict';

const http = require('http');
const fs = require('fs');
const async = require('async');
const { DynamoDBClient, QueryCommand } = require('@aws-sdk/client-dynamodb');

// ---- arguments -----------------------------------------------------------------

function parseArgs(argv) {
  const o = {
    endpoint: process.env.AWS_ENDPOINT_URL_DYNAMODB || 'http://127.0.0.1:18030',
    table: null, kind: null, from: null, to: null, rollup: null, step: null,
    groupBy: null, where: [], by: 'clicks', n: 10, prefixes: 100, concurrency: 20,
    variant: 'plain', out: null,
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = () => { if (i + 1 >= argv.length) throw new Error(`${a} needs a value`); return argv[++i]; };
    switch (a) {
      case '--endpoint': o.endpoint = v(); break;
      case '--table': o.table = v(); break;
      case '--kind': o.kind = v(); break;
      case '--from': o.from = v(); break;
      case '--to': o.to = v(); break;
      case '--rollup': o.rollup = v(); break;
      case '--step': o.step = v(); break;
      case '--group-by': o.groupBy = v(); break;
      case '--where': o.where.push(v()); break;
      case '--by': o.by = v(); break;
      case '-n': o.n = Number(v()); break;
      case '--prefixes': o.prefixes = Number(v()); break;
      case '--concurrency': o.concurrency = Number(v()); break;
      case '--variant': o.variant = v(); break;
      case '--out': o.out = v(); break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  for (const k of ['table', 'kind', 'from', 'to', 'rollup']) {
    if (!o[k]) throw new Error(`--${k} is required`);
  }
  if (!['totals', 'timeseries', 'top', 'ratios'].includes(o.kind)) throw new Error(`--kind ${o.kind}?`);
  if (!['plain', 'filter'].includes(o.variant)) throw new Error(`--variant ${o.variant}?`);
  if (!['minute', 'hour', 'day'].includes(o.rollup)) throw new Error(`--rollup ${o.rollup}?`);
  o.fromMs = parseTime(o.from);
  o.toMs = parseTime(o.to);
  o.stepMs = o.step ? parseDuration(o.step) : null;
  if (o.kind === 'timeseries' && !o.stepMs) throw new Error('timeseries needs --step');
  if ((o.kind === 'top') && !o.groupBy) throw new Error('top needs --group-by');
  o.filters = o.where.map((w) => {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(w);
    if (!m) throw new Error(`--where ${w}: only FIELD=VALUE is supported`);
    return { field: m[1], value: m[2] };
  });
  return o;
}

function parseTime(s) {
  if (/^\d+$/.test(s)) return Number(s);
  const ms = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(s) ? `${s}T00:00:00Z` : s);
  if (Number.isNaN(ms)) throw new Error(`bad time ${s}`);
  return ms;
}

function parseDuration(s) {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(s);
  if (!m) throw new Error(`bad duration ${s}`);
  return Number(m[1]) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
}

// ---- the table's keys (model/src/keys.rs, model/src/rollup.rs) -----------------

// The partition time bin of a rollup: minute items live in day partitions,
// hour and day items in month partitions.
function binsCovering(rollup, fromMs, toMs) {
  const labels = [];
  if (rollup === 'minute') {
    for (let d = Math.floor(fromMs / 86400e3) * 86400e3; d < toMs; d += 86400e3) {
      labels.push(new Date(d).toISOString().slice(0, 10));
    }
  } else {
    const f = new Date(fromMs);
    let y = f.getUTCFullYear();
    let m = f.getUTCMonth();
    for (;;) {
      const start = Date.UTC(y, m, 1);
      if (start >= toMs) break;
      labels.push(`${y}-${String(m + 1).padStart(2, '0')}`);
      m++;
      if (m === 12) { m = 0; y++; }
    }
  }
  return labels;
}

function partitionKey(prefix, rollup, bin) {
  return `${String(prefix).padStart(3, '0')}#${rollup}#${bin}`;
}

// ---- measures: the shipped layout's (model/src/measure/mod.rs) ----------------

const MEASURES = [
  { name: 'clicks', kind: 'count', scale: 0 },
  { name: 'impressions', kind: 'count', scale: 0 },
  { name: 'cost', kind: 'sum', scale: 6 },
  { name: 'cost_min', kind: 'min', scale: 6 },
  { name: 'cost_max', kind: 'max', scale: 6 },
];
const RATIOS = [{ name: 'ctr', numerator: 'clicks', denominator: 'impressions' }];

// A DynamoDB number as an exact integer of 10^-scale units.
function units(text, scale) {
  const m = /^(-?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!m) throw new Error(`not a number: ${text}`);
  let digits = (m[2] || '') + (m[3] || '');
  let exp = (m[4] ? Number(m[4]) : 0) - (m[3] || '').length + scale;
  if (exp >= 0) digits += '0'.repeat(exp);
  else {
    const cut = digits.length + exp;
    const dropped = cut > 0 ? digits.slice(cut) : digits;
    if (/[^0]/.test(dropped)) throw new Error(`${text} has more than ${scale} decimals`);
    digits = cut > 0 ? digits.slice(0, cut) : '0';
  }
  const v = BigInt(digits || '0');
  return m[1] === '-' ? -v : v;
}

function formatUnits(u, scale) {
  if (u === null) return null;
  const neg = u < 0n;
  let s = (neg ? -u : u).toString();
  if (scale > 0) {
    s = s.padStart(scale + 1, '0');
    let int = s.slice(0, s.length - scale);
    let frac = s.slice(s.length - scale).replace(/0+$/, '');
    s = frac ? `${int}.${frac}` : int;
  }
  return (neg ? '-' : '') + s;
}

function zeroValues() {
  return MEASURES.map((m) => (m.kind === 'min' || m.kind === 'max' ? null : 0n));
}

function addItem(acc, item) {
  MEASURES.forEach((m, i) => {
    const a = item[m.name];
    if (!a || a.N === undefined) return;
    const u = units(a.N, m.scale);
    if (m.kind === 'count' || m.kind === 'sum') acc[i] += u;
    else if (m.kind === 'min') acc[i] = acc[i] === null || u < acc[i] ? u : acc[i];
    else acc[i] = acc[i] === null || u > acc[i] ? u : acc[i];
  });
}

function ratioOf(values, r) {
  const n = values[MEASURES.findIndex((m) => m.name === r.numerator)];
  const d = values[MEASURES.findIndex((m) => m.name === r.denominator)];
  if (d === 0n || d === null) return null;
  return Number(n) / Number(d);
}

function cells(values) {
  const out = {};
  MEASURES.forEach((m, i) => { out[m.name] = m.kind === 'count' ? values[i].toString() : formatUnits(values[i], m.scale); });
  for (const r of RATIOS) out[r.name] = ratioOf(values, r);
  return out;
}

function text(attr) {
  if (!attr) return '';
  return attr.S !== undefined ? attr.S : attr.N !== undefined ? attr.N : '';
}

// Byte order of UTF-8, as gather orders groups.
function cmpBytes(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

// ---- the gatherer --------------------------------------------------------------

async function main() {
  const o = parseArgs(process.argv);
  const t0 = process.hrtime.bigint();
  const endpoint = new URL(o.endpoint);
  if (endpoint.hostname !== '127.0.0.1') throw new Error('this benchmark only talks to 127.0.0.1');
  const dynamoDB = new DynamoDBClient({
    endpoint: o.endpoint,
    region: process.env.AWS_REGION || 'us-east-1',
    requestHandler: { httpAgent: new http.Agent({ keepAlive: true, maxSockets: Math.max(50, o.concurrency) }) },
  });
  const bins = binsCovering(o.rollup, o.fromMs, o.toMs);
  const cost = { requests: 0, returned: 0, scanned: 0, rcu: 0, retries: 0 };

  const names = { '#t': 't' };
  const values = { ':from': { N: String(o.fromMs) }, ':to': { N: String(o.toMs) } };
  const conditions = ['#t >= :from', '#t < :to'];
  o.filters.forEach((f, i) => {
    names[`#d${i}`] = f.field;
    values[`:v${i}`] = { S: f.value };
    conditions.push(`#d${i} = :v${i}`);
  });

  // The seed's gatherQueryDDB, one scatter prefix: every bin, every page.
  const gatherQueryDDB = async (index) => {
    const items = [];
    for (const bin of bins) {
      let startKey;
      do {
        const params = {
          TableName: o.table,
          KeyConditionExpression: 'pk = :pk',
          ExpressionAttributeValues: { ':pk': { S: partitionKey(index, o.rollup, bin) } },
          ReturnConsumedCapacity: 'TOTAL',
          ExclusiveStartKey: startKey,
        };
        if (o.variant === 'filter') {
          params.FilterExpression = conditions.join(' AND ');
          params.ExpressionAttributeNames = names;
          Object.assign(params.ExpressionAttributeValues, values);
        }
        const data = await dynamoDB.send(new QueryCommand(params));
        cost.requests++;
        cost.retries += Math.max(0, (data.$metadata.attempts || 1) - 1);
        cost.returned += data.Count || 0;
        cost.scanned += data.ScannedCount || 0;
        cost.rcu += data.ConsumedCapacity ? data.ConsumedCapacity.CapacityUnits || 0 : 0;
        for (const it of data.Items) items.push(it);
        startKey = data.LastEvaluatedKey;
      } while (startKey);
    }
    return items;
  };

  // async.mapLimit(scatteredValues, concurrentReads, gatherQueryDDB), as in the seed.
  const scatteredValues = Array.from({ length: o.prefixes }, (_, i) => i);
  const results = await async.mapLimit(scatteredValues, o.concurrency, gatherQueryDDB);

  // Aggregate: the window and the filters, exactly (plain applies them here;
  // for filter this only re-checks what DynamoDB kept).
  const groups = new Map();
  const step = o.stepMs;
  for (const items of results) {
    for (const it of items) {
      const t = Number(it.t && it.t.N);
      if (!(t >= o.fromMs && t < o.toMs)) continue;
      if (!o.filters.every((f) => text(it[f.field]) === f.value)) continue;
      const bucket = o.kind === 'timeseries' ? Math.floor(t / step) * step : null;
      const g = o.groupBy ? text(it[o.groupBy]) : '';
      const key = `${bucket}\u0000${g}`;
      let e = groups.get(key);
      if (!e) { e = { bucket, group: g, values: zeroValues() }; groups.set(key, e); }
      addItem(e.values, it);
    }
  }

  const rows = [];
  if (o.kind === 'timeseries' && !o.groupBy) {
    for (let b = Math.floor(o.fromMs / step) * step; b < o.toMs; b += step) {
      const e = groups.get(`${b}\u0000`);
      rows.push({ time: b, ...cells(e ? e.values : zeroValues()) });
    }
  } else if (o.kind === 'top') {
    const r = RATIOS.find((x) => x.name === o.by);
    const mi = MEASURES.findIndex((m) => m.name === o.by);
    if (!r && mi < 0) throw new Error(`--by ${o.by}?`);
    const ni = r && MEASURES.findIndex((m) => m.name === r.numerator);
    const di = r && MEASURES.findIndex((m) => m.name === r.denominator);
    // gather's exact order: ratios by cross products (no denominator: last), ties by group.
    const rank = (a, b) => {
      if (r) {
        const [na, da, nb, db] = [a.values[ni], a.values[di], b.values[ni], b.values[di]];
        if (da === 0n && db === 0n) return 0;
        if (da === 0n) return -1;
        if (db === 0n) return 1;
        const x = na * db;
        const y = nb * da;
        return x < y ? -1 : x > y ? 1 : 0;
      }
      const [x, y] = [a.values[mi], b.values[mi]];
      if (x === y) return 0;
      if (x === null) return -1;
      if (y === null) return 1;
      return x < y ? -1 : 1;
    };
    const all = [...groups.values()].sort((a, b) => rank(b, a) || cmpBytes(a.group, b.group));
    all.slice(0, o.n).forEach((e, i) => rows.push({ rank: String(i + 1), [o.groupBy]: e.group, ...cells(e.values) }));
  } else {
    const all = [...groups.values()].sort((a, b) => (a.bucket - b.bucket) || cmpBytes(a.group, b.group));
    if (!o.groupBy && all.length === 0) all.push({ group: '', values: zeroValues() });
    for (const e of all) {
      const row = {};
      if (o.kind === 'timeseries') row.time = e.bucket;
      if (o.groupBy) row[o.groupBy] = e.group;
      const c = cells(e.values);
      if (o.kind === 'ratios') {
        for (const r of RATIOS) { row[r.numerator] = c[r.numerator]; row[r.denominator] = c[r.denominator]; row[r.name] = c[r.name]; }
      } else Object.assign(row, c);
      rows.push(row);
    }
  }
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  if (o.out) fs.writeFileSync(o.out, JSON.stringify({ report: o.kind, rows }, null, 1) + '\n');
  const summary = {
    gatherer: `peer-${o.variant}`, kind: o.kind, bins, prefixes: o.prefixes, concurrency: o.concurrency,
    wall_s: wall, requests: cost.requests, scanned: cost.scanned, returned: cost.returned,
    rcu: cost.rcu, retries: cost.retries, rows: rows.length,
  };
  process.stdout.write(JSON.stringify(summary) + '\n');
  dynamoDB.destroy();
}

main().catch((e) => {
  console.error(`gatherer: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
