#!/usr/bin/env bash
# BENCHMARKS.md "Time ranges": a month of the shipped traffic in SQLite
# (3 M events over 30 days, the shipped layout), then every Grafana
# time-picker option and report kind read before (one rollup), after (mixed
# rollups where complete) and ideally (every bucket complete), at two
# "now"s. Usage: bench/ranges.sh [DIR [LOADGEN FLAGS...]] (the table is kept
# in DIR, default /tmp/zigzag-ranges, made again only when missing, with
# the extra loadgen flags given: e.g. --zipf 0.6 --campaigns 200).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}"
DIR="${1:-/tmp/zigzag-ranges}"
shift || true
EMBEDDED="$CARGO_TARGET_DIR/embedded"
cargo build --release --locked -q -p zigzag-app --no-default-features --bin loadgen --target-dir "$EMBEDDED"
cargo build --release --locked -q -p zigzag-gather --example ranges_bench
mkdir -p "$DIR"
if [ ! -f "$DIR/z.db" ]; then
  echo "== loadgen → ingest → $DIR/z.db (3,000,000 records over 30 days)" >&2
  (cd "$DIR" && "$EMBEDDED/release/loadgen" --records 3000000 --span 30d --start 2026-10-30T00:00:00Z \
    --sink ingest --db z.db --truth truth.json --dead-letters dead-letters.jsonl "$@" >&2)
fi
# Grafana's now is any instant: 20:58:17 (windows end at 20:59, off the
# hour, the issue's case) and 20:59:17 (they end at 21:00, on it).
for NOW_MS in 1795899497000 1795899557000; do
  echo
  echo "now = $(date -u -d @$((NOW_MS / 1000)) +%Y-%m-%dT%H:%M:%SZ)"
  echo
  "$CARGO_TARGET_DIR/release/examples/ranges_bench" "$DIR/z.db" "$NOW_MS"
done
