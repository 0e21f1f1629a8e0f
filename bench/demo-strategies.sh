#!/usr/bin/env bash
# Every Z-query strategy on six reports of the demo store: requests / items
# scanned / RCU per report and strategy, and `auto` against the cheapest
# fixed one (issue 19, item 7: aggregates as ingest writes them, beside the
# synthetic sets of `cargo bench -p zigzag-core --bench strategies`).
#
#   bench/demo-strategies.sh [DB]        # DB: a store ./demo.sh wrote (default demo/zigzag.db)
#
# GATHER=path picks the binary (default: $CARGO_TARGET_DIR/release/gather,
# built if missing). Every strategy must return the same rows: the script
# compares each one's JSON answer with naive's and stops on a difference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
db=${1:-$root/demo/zigzag.db}
[[ -s $db ]] || { echo "demo-strategies.sh: no store at $db (run ./demo.sh first)" >&2; exit 2; }
gather=${GATHER:-$CARGO_TARGET_DIR/release/gather}
if [[ -z ${GATHER:-} ]]; then
	(cd "$root" && cargo build --release --quiet -p zigzag-app --no-default-features --bin gather)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

REPORTS=(
	"top 10 referrers by clicks, day|top --from 2026-11-20 --to 2026-11-21 --group-by referrer -n 10 --by clicks"
	"CTR by country, DE and FR, day|ctr --from 2026-11-20 --to 2026-11-21 --group-by country --where country in DE,FR"
	"hourly series of one referrer, day|timeseries --from 2026-11-20 --to 2026-11-21 --step 1h --where referrer=ref00001.example.com"
	"30 min at 5 m by campaign|timeseries --from 2026-11-20T10:00:00Z --to 2026-11-20T10:30:00Z --step 5m --group-by campaign"
	"2 h at 10 m, country=DE|timeseries --from 2026-11-20T10:00:00Z --to 2026-11-20T12:00:00Z --step 10m --where country=DE"
	"top referrers in DE, 3 h|top --from 2026-11-20T09:00:00Z --to 2026-11-20T12:00:00Z --group-by referrer -n 10 --where country=DE"
)
STRATEGIES=(naive auto costed precise page-jump elastic)
FIXED=(naive precise page-jump elastic)

# run REPORT_ARGS STRATEGY -> "requests scanned rcu", the answer in $tmp/STRATEGY.json
run() {
	local args=$1 s=$2
	# --where takes one argument with spaces: split the report's words, rejoin after --where.
	local -a words
	read -r -a words <<<"${args%% --where *}"
	[[ $args == *" --where "* ]] && words+=(--where "${args#* --where }")
	"$gather" --db "$db" "${words[@]}" --strategy "$s" --format json --explain >"$tmp/$s.json" 2>"$tmp/$s.explain"
	awk '/^actual/ { a = 1 } a && $1 == "requests:" { r = $2 } a && $1 == "scanned:" { sc = $2 } a && $1 == "RCU:" { rcu = $2 }
		END { print r, sc, rcu }' "$tmp/$s.explain"
}

printf '| report |'
printf ' %s |' "${STRATEGIES[@]}"
printf ' auto / best fixed | costed / best fixed |\n|---|'
printf -- '---|%.0s' "${STRATEGIES[@]}"
printf -- '---:|---:|\n'
for spec in "${REPORTS[@]}"; do
	name=${spec%%|*} args=${spec#*|}
	declare -A rcu=()
	printf '| %s |' "$name"
	for s in "${STRATEGIES[@]}"; do
		read -r req scanned r <<<"$(run "$args" "$s")"
		rcu[$s]=$r
		printf ' %s / %s / %s |' "$req" "$scanned" "$r"
		if [[ $s != naive && -f $tmp/naive.json ]] && ! cmp -s "$tmp/naive.json" "$tmp/$s.json"; then
			echo >&2
			echo "demo-strategies.sh: $s answered \"$name\" differently from naive" >&2
			exit 1
		fi
	done
	best=$(for s in "${FIXED[@]}"; do echo "${rcu[$s]}"; done | sort -g | head -1)
	awk -v a="${rcu[auto]}" -v c="${rcu[costed]}" -v b="$best" 'BEGIN { printf " %.2f | %.2f |\n", a / b, c / b }'
	unset rcu
done
