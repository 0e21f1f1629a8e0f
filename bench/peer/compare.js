#!/usr/bin/env node
// Compares gather's JSON report (`gather ... --format json`) with the peer's
// (`gatherer.js --out`): same rows, in the same order, same values. Counts
// and amounts are compared exactly (as decimal text, never as floats),
// instants as epoch ms, ratios as numbers (both sides divide the same two
// integers). Exit 0 and "MATCH" when equal; exit 1 and the differences.
//
//   node compare.js gather.json peer.json
'use strict';

const fs = require('fs');

// gather writes amounts as exact JSON numbers: keep their text.
function parseExact(text) {
  const quoted = text.replace(/(:\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(\s*[,}\n])/g, '$1"$2"$3');
  return JSON.parse(quoted);
}

function canonDecimal(s) {
  const m = /^(-?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(s);
  if (!m) return `?${s}`;
  let int = m[2] || '0';
  let frac = m[3] || '';
  let exp = m[4] ? Number(m[4]) : 0;
  if (exp > 0) { frac = frac.padEnd(exp, '0'); int += frac.slice(0, exp); frac = frac.slice(exp); }
  if (exp < 0) { int = int.padStart(-exp + 1, '0'); frac = int.slice(int.length + exp) + frac; int = int.slice(0, int.length + exp); }
  int = int.replace(/^0+(?=\d)/, '');
  frac = frac.replace(/0+$/, '');
  const body = frac ? `${int}.${frac}` : int;
  return body === '0' ? '0' : m[1] + body;
}

function same(col, g, p) {
  if (g === null || g === undefined) return p === null || p === undefined;
  if (p === null || p === undefined) return false;
  if (col === 'time') return Date.parse(g) === Number(p);
  if (col === 'ctr' || typeof p === 'number') {
    const a = Number(g);
    const b = Number(p);
    return a === b || Math.abs(a - b) <= 1e-12 * Math.max(Math.abs(a), Math.abs(b));
  }
  if (/^-?[\d.]+([eE][+-]?\d+)?$/.test(g)) return canonDecimal(g) === canonDecimal(String(p));
  return String(g) === String(p);
}

function main() {
  const [gPath, pPath] = process.argv.slice(2);
  const g = parseExact(fs.readFileSync(gPath, 'utf8'));
  const p = JSON.parse(fs.readFileSync(pPath, 'utf8'));
  const diffs = [];
  if (g.report !== p.report) diffs.push(`report kind: gather ${g.report}, peer ${p.report}`);
  if (g.rows.length !== p.rows.length) diffs.push(`rows: gather ${g.rows.length}, peer ${p.rows.length}`);
  const n = Math.min(g.rows.length, p.rows.length);
  let checked = 0;
  for (let i = 0; i < n && diffs.length < 20; i++) {
    for (const [col, gv] of Object.entries(g.rows[i])) {
      if (!(col in p.rows[i])) { diffs.push(`row ${i}: the peer has no column ${col}`); continue; }
      checked++;
      if (!same(col, gv, p.rows[i][col])) {
        diffs.push(`row ${i} ${col}: gather ${JSON.stringify(gv)}, peer ${JSON.stringify(p.rows[i][col])}`);
      }
    }
  }
  if (diffs.length) {
    console.log(`MISMATCH ${gPath} vs ${pPath}`);
    for (const d of diffs) console.log(`  ${d}`);
    process.exit(1);
  }
  console.log(`MATCH: ${g.rows.length} rows, ${checked} values`);
}

main();
