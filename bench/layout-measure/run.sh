#!/usr/bin/env bash
# What a measure added to a projection costs to write (BENCHMARKS.md,
# "A measure added"): the shipped layout, then the same with a counter
# (a sum) and with a distinct count added to cc, each ingested from the
# same traffic into a fresh SQLite table, on two traffic shapes. A table
# with the measure from the start writes what one that gained it writes
# from its cut on (tests/tests/layout_measure.rs: item for item).
# Usage: bench/layout-measure/run.sh [RECORDS]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
records=${1:-200000}
cargo build --release --locked -q -p zigzag-app --bin loadgen --bin gather
bin=$CARGO_TARGET_DIR/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$bin/loadgen" --records 10 --sink ingest --db shipped.db >/dev/null 2>&1
"$bin/gather" --db shipped.db layout show > shipped.toml
rm -f shipped.db*
python3 - <<'PY'
s = open("shipped.toml").read()
old = '    "cost_max",\n]\nname = "cc"'
assert old in s, "cc's measures as the shipped layout shows them"
for name, measure, block in [
    ("counter", "cost_total", 'type = "sum"\nfield = "cost"\n'),
    ("distinct", "users", 'type = "distinct"\nfield = "user_id"\n'),
]:
    text = s.replace(old, f'    "cost_max",\n    "{measure}",\n]\nname = "cc"')
    open(f"{name}.toml", "w").write(f'{text}\n[[measure]]\nname = "{measure}"\n{block}')
PY
for shape in "--seed 1" "--seed 2 --campaigns 200 --zipf 1.3"; do
  for layout in shipped counter distinct; do
    rm -f "$layout.db"*
    # shellcheck disable=SC2086
    line=$("$bin/loadgen" --records "$records" --span 1d $shape --sink ingest --db "$layout.db" --config "$layout.toml" 2>&1 | tail -1)
    items=$(grep -oE '[0-9]+ items, [0-9]+ write requests \([0-9.]+ per item, [0-9.]+ per valid record' <<<"$line")
    largest=$(grep -oE 'largest item [0-9]+ B' <<<"$line")
    echo "$shape | $layout | $items | $largest"
  done
done
