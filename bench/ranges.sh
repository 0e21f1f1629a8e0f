#!/usr/bin/env bash
# BENCHMARKS.md "Time ranges": a month of the shipped traffic in SQLite
# (3 M events over 30 days, the shipped layout), then every Grafana
# time-picker option and report kind read before (one rollup), after (mixed
# rollups where complete) and ideally (every bucket complete), at a "now" of
# 2026-11-28T20:59:17Z. Usage: bench/ranges.sh [DIR] (the table is kept in
# DIR, default /tmp/zigzag-ranges, and made again only when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}"
DIR="${1:-/tmp/zigzag-ranges}"
EMBEDDED="$CARGO_TARGET_DIR/embedded"
cargo build --release --locked -q -p zigzag-app --no-default-features --bin loadgen --target-dir "$EMBEDDED"
cargo build --release --locked -q -p zigzag-gather --example ranges_bench
mkdir -p "$DIR"
if [ ! -f "$DIR/z.db" ]; then
  echo "== loadgen → ingest → $DIR/z.db (3,000,000 records over 30 days)" >&2
  (cd "$DIR" && "$EMBEDDED/release/loadgen" --records 3000000 --span 30d --start 2026-10-30T00:00:00Z \
    --sink ingest --db z.db --truth truth.json --dead-letters dead-letters.jsonl >&2)
fi
NOW_MS=1795899557000 # 2026-11-28T20:59:17Z
"$CARGO_TARGET_DIR/release/examples/ranges_bench" "$DIR/z.db" "$NOW_MS"
