#!/usr/bin/env bash
# Z-order part 1's experiment: 300,000 generated weather reports, the blog's three
# queries, every strategy, beside a timestamp index. Extra arguments go to
# `gather zbench` (e.g. --json, --garbage 1); SCHEMA=path picks another schema
# (schema-weekly.toml bins the timestamp by week into the partition key).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
cd "$root"
cargo build --release --quiet -p zigzag-app --bin gather && cargo build --release --quiet -p zigzag-gather --example weather_csv
# v2: rows carry the blog's sort key (timestamp_lat_long), as its items do.
data=${WEATHER_CSV:-$CARGO_TARGET_DIR/weather-300k-v2.csv}
if [ ! -s "$data" ]; then
  "$CARGO_TARGET_DIR/release/examples/weather_csv" 300000 1 > "$data.tmp" && mv "$data.tmp" "$data"
fi
schema=${SCHEMA:-$here/schema.toml}
exec "$CARGO_TARGET_DIR/release/gather" zbench --csv "$data" --schema "$schema" \
  --queries "$here/queries.toml" "$@"
