#!/usr/bin/env bash
# Zigzag `gather` against the GSI write-scaling article's Node.js gatherer (a fair peer), side by
# side on one DynamoDB Local table, directly and through a loopback proxy
# that adds ~8 ms per request. One command:
#
#   bench/peer/run.sh
#
# It installs the peer's npm dependencies (npm ci), builds the release
# binaries (cargo, $CARGO_TARGET_DIR, default ~/.cache/zigzag-target) unless
# ZIGZAG_BIN points at a directory holding loadgen, ingest and gather,
# installs and starts DynamoDB Local on 127.0.0.1 with the repository's
# deploy/local scripts (ports and run directory of its own; stopped on exit),
# loads PEER_EVENTS events through the pipeline (loadgen → JSONL files →
# ingest → DynamoDB), checks them against loadgen's ground truth, runs the
# four README reports with gather and both peer variants, checks that every
# peer answer equals gather's (exit 1 if not), and prints the table.
#
# Knobs (environment):
#   PEER_EVENTS=200000     events loaded
#   PEER_PREFIXES=100      the base's scatter prefixes (layout.toml) the peer queries
#   PEER_CONCURRENCY=20    the peer's async.mapLimit concurrency (the seed's)
#   PEER_DELAY_MS=8        the proxy's added latency per request
#   PEER_REPEAT=3          measured runs per (report, gatherer, path); the table shows medians
#   PEER_RUN_DIR=bench/peer/run   logs, data, results
#   PEER_KEEP=1            leave DynamoDB Local running (a later run reuses the loaded table)
#   ZIGZAG_DYNAMODB_PORT=18030, PEER_PROXY_PORT=18034 (18031-18033 are given to the unused Kinesis ports)
#   ZIGZAG_BIN=DIR         use these binaries, do not build
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
N=${PEER_EVENTS:-200000}
PREFIXES=${PEER_PREFIXES:-100}
CONC=${PEER_CONCURRENCY:-20}
DELAY_MS=${PEER_DELAY_MS:-8}
REPEAT=${PEER_REPEAT:-3}
RUN=${PEER_RUN_DIR:-$HERE/run}
TABLE=${PEER_TABLE:-zigzag_peer}
PROXY_PORT=${PEER_PROXY_PORT:-18034}
export ZIGZAG_DYNAMODB_PORT=${ZIGZAG_DYNAMODB_PORT:-18030}
export ZIGZAG_KINESIS_PORT=${ZIGZAG_KINESIS_PORT:-18031}
export ZIGZAG_KINESALITE_PORT=${ZIGZAG_KINESALITE_PORT:-18032}
export ZIGZAG_KINESIS_TLS_PORT=${ZIGZAG_KINESIS_TLS_PORT:-18033}
export ZIGZAG_EMULATORS_RUN=$RUN/emulators
export ZIGZAG_KINESIS_LOCAL=0 ZIGZAG_KINESALITE=0
DIRECT=http://127.0.0.1:$ZIGZAG_DYNAMODB_PORT
PROXIED=http://127.0.0.1:$PROXY_PORT

[[ $N =~ ^[1-9][0-9]*$ && $REPEAT =~ ^[1-9][0-9]*$ && $REPEAT -le 20 ]] ||
	{ echo "run.sh: PEER_EVENTS must be a positive integer and PEER_REPEAT 1..20" >&2; exit 2; }
grep -q "^prefixes = $PREFIXES\$" "$HERE/layout.toml" ||
	{ echo "run.sh: PEER_PREFIXES=$PREFIXES is not the base's prefixes in layout.toml" >&2; exit 2; }

log() { printf '[peer %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
now_ns() { date +%s%N; }
mkdir -p "$RUN"
export NODE_NO_WARNINGS=1 # the SDK warns that releases after January 2027 need Node 22

# ---- 1. the peer's dependencies, the binaries ------------------------------------
log "npm ci (bench/peer/node_modules)"
(cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

if [[ -n ${ZIGZAG_BIN:-} ]]; then
	BIN=$ZIGZAG_BIN
else
	export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
	log "cargo build --release (loadgen, ingest, gather) into $CARGO_TARGET_DIR"
	(cd "$REPO" && cargo build --release -q -p zigzag-app --bin loadgen --bin ingest --bin gather)
	BIN=$CARGO_TARGET_DIR/release
fi
for b in loadgen ingest gather; do
	[[ -x $BIN/$b ]] || { echo "run.sh: $BIN/$b not found" >&2; exit 2; }
done

# ---- 2. DynamoDB Local on 127.0.0.1, our own port and run directory ------------
PROXY_PID=
cleanup() {
	local rc=$?
	if [[ -n $PROXY_PID ]]; then kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; fi
	if [[ ${PEER_KEEP:-0} != 1 ]]; then
		"$REPO/deploy/local/down.sh" >/dev/null 2>&1 || true
	else
		log "PEER_KEEP=1: DynamoDB Local left running (stop: ZIGZAG_EMULATORS_RUN=$ZIGZAG_EMULATORS_RUN deploy/local/down.sh)"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$REPO/deploy/local/install.sh" >&2
eval "$("$REPO/deploy/local/up.sh")"
export AWS_ENDPOINT_URL_DYNAMODB=$DIRECT

# ---- 3. load through the pipeline (unless this table is already loaded) --------
have=$(cd "$HERE" && node bench.js table-items "$DIRECT" "$TABLE")
if [[ -f $RUN/loaded && $(cat "$RUN/loaded") == "$TABLE $N" && $have -gt 0 ]]; then
	log "table $TABLE already holds $N events' items ($have items); not loading again"
else
	[[ $have == 0 ]] || { echo "run.sh: table $TABLE exists with other data; stop the emulator (deploy/local/down.sh) or set PEER_TABLE" >&2; exit 2; }
	rm -rf "$RUN/events" "$RUN/loaded"
	log "loadgen: $N events → $RUN/events (4 shards of JSONL) + truth.json"
	"$BIN/loadgen" --records "$N" --shards 4 --sink "files:$RUN/events/" --truth "$RUN/truth.json" >"$RUN/loadgen.log" 2>&1
	log "ingest → DynamoDB Local table $TABLE (layout.toml: base minute+day in $PREFIXES prefixes + the shipped projections)"
	t0=$(now_ns)
	"$BIN/ingest" --input "$RUN"/events/*.jsonl --dynamodb "$TABLE" --config "$HERE/layout.toml" \
		--dead-letters "$RUN/dead-letters.jsonl" >"$RUN/ingest.log" 2>&1
	t1=$(now_ns)
	log "ingest took $(((t1 - t0) / 1000000)) ms: $(tail -n 3 "$RUN/ingest.log" | tr '\n' ' ')"
	log "gather check against the ground truth"
	"$BIN/gather" --dynamodb "$TABLE" check --truth "$RUN/truth.json" >"$RUN/check.log" 2>&1 ||
		{ cat "$RUN/check.log" >&2; echo "run.sh: gather check failed: the load is wrong" >&2; exit 1; }
	tail -n 2 "$RUN/check.log" >&2
	echo "$TABLE $N" >"$RUN/loaded"
fi
log "table $TABLE: $(cd "$HERE" && node bench.js table-items "$DIRECT" "$TABLE") items (DescribeTable)"

# ---- 4. the proxy --------------------------------------------------------------
node "$HERE/proxy.js" --port "$PROXY_PORT" --target "$DIRECT" --delay-ms "$DELAY_MS" 2>"$RUN/proxy.log" &
PROXY_PID=$!
for _ in $(seq 50); do
	(cd "$HERE" && node bench.js proxy-stats "$PROXY_PORT" >/dev/null 2>&1) && break
	sleep 0.1
done
(cd "$HERE" && node bench.js proxy-stats "$PROXY_PORT" >/dev/null) || { echo "run.sh: the proxy did not start" >&2; exit 1; }

# ---- 5. the reports ------------------------------------------------------------
# name | gather's arguments | the peer's arguments (the same window, filter, grouping)
REPORTS=(
	"totals|totals --from 2026-11-20 --to 2026-11-21 --group-by country|--kind totals --from 2026-11-20 --to 2026-11-21 --rollup day --group-by country"
	"timeseries|timeseries --from 2026-11-20T06:00:00Z --to 2026-11-20T12:00:00Z --step 5m|--kind timeseries --from 2026-11-20T06:00:00Z --to 2026-11-20T12:00:00Z --rollup minute --step 5m"
	"top|top --from 2026-11-20 --to 2026-11-21 --group-by referrer -n 20 --by ctr --where country=DE|--kind top --from 2026-11-20 --to 2026-11-21 --rollup day --group-by referrer -n 20 --by ctr --where country=DE"
	"ratios|ratios --last 7d --now 2026-11-21 --group-by campaign|--kind ratios --from 2026-11-14 --to 2026-11-21 --rollup day --group-by campaign"
)
RESULTS=$RUN/results.jsonl
OUT=$RUN/out
rm -rf "$OUT"
mkdir -p "$OUT"
: >"$RESULTS"
MISMATCHES=0

# run_one REPORT_INDEX GATHERER PATH REP RECORD(0|1)
run_one() {
	local spec=${REPORTS[$1]} who=$2 path=$3 rep=$4 record=$5
	local name=${spec%%|*} rest=${spec#*|}
	local gargs=${rest%%|*} pargs=${rest#*|}
	local endpoint=$DIRECT tag="$name.$who.$path.$rep" t0 t1 cost metered=null
	[[ $path == proxy ]] && endpoint=$PROXIED
	[[ $path == proxy ]] && (cd "$HERE" && node bench.js proxy-reset "$PROXY_PORT")
	if [[ $who == gather ]]; then
		# The warm-up pass also reads every other exact candidate (--explain-all,
		# kept in out/*.0.explain); measured runs read only the chosen one.
		local explain=--explain
		[[ $record == 0 ]] && explain=--explain-all
		t0=$(now_ns)
		# shellcheck disable=SC2086 # gargs is a list of words
		AWS_ENDPOINT_URL_DYNAMODB=$endpoint "$BIN/gather" --dynamodb "$TABLE" $gargs --format json $explain \
			>"$OUT/$tag.json" 2>"$OUT/$tag.explain" || { cat "$OUT/$tag.explain" >&2; exit 1; }
		t1=$(now_ns)
		cost=$(cd "$HERE" && node bench.js gather-cost "$OUT/$tag.explain")
	else
		t0=$(now_ns)
		# shellcheck disable=SC2086
		cost=$(node "$HERE/gatherer.js" --endpoint "$endpoint" --table "$TABLE" $pargs --prefixes "$PREFIXES" \
			--concurrency "$CONC" --variant "${who#peer-}" --out "$OUT/$tag.json")
		t1=$(now_ns)
	fi
	[[ $path == proxy ]] && metered=$(cd "$HERE" && node bench.js proxy-stats "$PROXY_PORT")
	if [[ $record == 1 ]]; then
		node -e '
			const [report, who, path, rep, wall, cost, metered] = process.argv.slice(1);
			const c = JSON.parse(cost);
			const m = JSON.parse(metered);
			const r = { report, gatherer: who, path, rep: Number(rep), wall_s: Number(wall) / 1e9,
				query_s: c.query_s !== undefined ? c.query_s : c.wall_s,
				requests: c.requests + (c.stats_requests || 0), scanned: c.scanned, returned: c.returned,
				rcu: c.rcu + (c.stats_rcu || 0), source: c.source || null, plan: c.plan || null, proxy: m };
			process.stdout.write(JSON.stringify(r) + "\n");
		' "$name" "$who" "$path" "$rep" "$((t1 - t0))" "$cost" "$metered" >>"$RESULTS"
	fi
}

# One unrecorded pass first (DynamoDB Local's JIT and caches warm for everyone),
# then REPEAT recorded passes, the gatherers interleaved.
for i in "${!REPORTS[@]}"; do
	name=${REPORTS[$i]%%|*}
	for who in gather peer-plain peer-filter; do
		log "warm-up: $name, $who"
		run_one "$i" "$who" direct 0 0
	done
	# Answers: each peer variant equals gather.
	for who in peer-plain peer-filter; do
		if res=$(cd "$HERE" && node compare.js "$OUT/$name.gather.direct.0.json" "$OUT/$name.$who.direct.0.json"); then
			log "$name: $who $res"
		else
			printf '%s\n' "$res" >&2
			MISMATCHES=$((MISMATCHES + 1))
		fi
	done
done
for path in direct proxy; do
	for rep in $(seq "$REPEAT"); do
		for i in "${!REPORTS[@]}"; do
			for who in gather peer-plain peer-filter; do
				log "$path, run $rep/$REPEAT: ${REPORTS[$i]%%|*}, $who"
				run_one "$i" "$who" "$path" "$rep" 1
				if [[ $who != gather ]]; then
					name=${REPORTS[$i]%%|*}
					if ! res=$(cd "$HERE" && node compare.js "$OUT/$name.gather.$path.$rep.json" "$OUT/$name.$who.$path.$rep.json"); then
						printf '%s\n' "$res" >&2
						MISMATCHES=$((MISMATCHES + 1))
					fi
				fi
			done
		done
	done
done

echo
echo "$N events, $PREFIXES scatter prefixes (base), peer concurrency $CONC, proxy +$DELAY_MS ms/request, median of $REPEAT runs"
echo
(cd "$HERE" && node bench.js markdown "$RESULTS")
if ((MISMATCHES > 0)); then
	echo
	echo "ANSWERS DIFFER: $MISMATCHES peer answers are not gather's (see above); the numbers above are void" >&2
	exit 1
fi
echo
echo "Every peer answer equals gather's (compare.js: every row, every value)."
