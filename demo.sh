#!/usr/bin/env bash
# The embedded pipeline end to end, no AWS: generate ~1M click/impression
# events (deterministic, with late and malformed ones), ingest them into
# demo/zigzag.db (SQLite), print reports, and check every total against
# the generator's ground truth. Usage: ./demo.sh [records]
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}"
RECORDS="${1:-1000000}"
OUT=demo

# Built without the AWS SDK (--no-default-features: no DynamoDB, no
# Kinesis), which the embedded demo never calls and which would take
# minutes to compile; in a directory of its own, so that these binaries
# never stand in for the full ones in $CARGO_TARGET_DIR/release; with the
# `demo` profile (Cargo.toml), built for a short first wait.
echo "== building (release, embedded only; the first build takes a couple of minutes)"
cargo build --profile demo --locked -q -p zigzag-app --no-default-features --bin loadgen --bin gather \
  --target-dir "$CARGO_TARGET_DIR/embedded"
BIN="$CARGO_TARGET_DIR/embedded/demo"

rm -rf "$OUT" && mkdir -p "$OUT"
echo "== loadgen → ingest → $OUT/zigzag.db ($RECORDS records, 4 shards)"
"$BIN/loadgen" --records "$RECORDS" --sink ingest --db "$OUT/zigzag.db" \
  --truth "$OUT/truth.json" --dead-letters "$OUT/dead-letters.jsonl"

G=("$BIN/gather" --db "$OUT/zigzag.db")
DAY=(--from 2026-11-20 --to 2026-11-21)
echo
echo "== top 10 referrers by clicks on 2026-11-20"
"${G[@]}" top "${DAY[@]}" --group-by referrer -n 10 --by clicks
echo
echo "== CTR by country, DE and FR only, with the query plan and its cost"
"${G[@]}" ctr "${DAY[@]}" --group-by country --where "country in DE,FR" --explain
echo
echo "== clicks per hour (chart: $OUT/clicks-per-hour.svg)"
"${G[@]}" timeseries "${DAY[@]}" --step 1h --chart "$OUT/clicks-per-hour.svg" > "$OUT/clicks-per-hour.txt"
head -n 6 "$OUT/clicks-per-hour.txt"
echo "   ... (24 rows in $OUT/clicks-per-hour.txt)"
echo
echo "== every total against the ground truth ($OUT/truth.json)"
if "${G[@]}" check --truth "$OUT/truth.json" > "$OUT/check.txt"; then
  grep -E "total|day" "$OUT/check.txt"
  echo "MATCH: totals overall, per day, per country and per campaign equal the ground truth exactly" \
       "($(grep -c MATCH "$OUT/check.txt") groups; full table in $OUT/check.txt);" \
       "$(wc -l < "$OUT/dead-letters.jsonl") malformed records are in $OUT/dead-letters.jsonl"
else
  cat "$OUT/check.txt"
  echo "MISMATCH: the store differs from the ground truth (see above)" >&2
  exit 1
fi
