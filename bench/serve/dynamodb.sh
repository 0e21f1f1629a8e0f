#!/usr/bin/env bash
# The dashboard viewers benchmark against DynamoDB Local with a running
# ingest (BENCHMARKS.md, "gather serve: dashboard viewers"): the emulators on
# loopback (deploy/local/up.sh, kinesalite), a day of history put on the
# stream and ingested, then live traffic at --rate events/s while `gather
# serve` answers 1, 10 and 100 viewers of the shipped dashboard (each
# refreshing every 5 s) for --minutes each. Prints viewers.py's lines:
# latency per query and panel, RCU and read requests per minute, cache hits.
#
# With --backlog, `gather serve` and the viewers start as soon as ingest
# does: they open the dashboard while it flushes the day's backlog (a cold
# cache under a long flush).
# With --moving, each refresh asks at its own clock, as Grafana does (both
# ends of `now-24h` .. `now` move); without, every ask is at one `time`.
#
# Usage: bench/serve/dynamodb.sh [--minutes 10] [--rate 200] [--history 300000]
#        [--viewers "1 10 100"] [--cache-bytes 256MiB] [--recheck 1s] [--max-queries 128]
#        [--backlog] [--moving]
# Needs release binaries with the AWS feature (built here if missing).
# ZIGZAG_BENCH_SERVE_LOG=FILE keeps gather serve's log, every plan explained.
# Everything listens on 127.0.0.1; every process is stopped at the end.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MINUTES=10 RATE=200 HISTORY=300000 VIEWERS="1 10 100" CACHE=256MiB RECHECK=1s MAX_QUERIES=128 BACKLOG=0 MOVING=0
while (($#)); do
	case $1 in
	--minutes) MINUTES=$2 && shift 2 ;;
	--rate) RATE=$2 && shift 2 ;;
	--history) HISTORY=$2 && shift 2 ;;
	--viewers) VIEWERS=$2 && shift 2 ;;
	--cache-bytes) CACHE=$2 && shift 2 ;;
	--recheck) RECHECK=$2 && shift 2 ;;
	--max-queries) MAX_QUERIES=$2 && shift 2 ;;
	--backlog) BACKLOG=1 && shift ;;
	--moving) MOVING=1 && shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" && exit 0 ;;
	*) echo "unknown option $1 (see --help)" >&2 && exit 2 ;;
	esac
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
BIN=$CARGO_TARGET_DIR/release
(cd "$ROOT" && cargo build --release -q -p zigzag-app --bins)

export ZIGZAG_DYNAMODB_PORT=${ZIGZAG_DYNAMODB_PORT:-18100} ZIGZAG_KINESALITE_PORT=${ZIGZAG_KINESALITE_PORT:-18102}
export ZIGZAG_KINESIS_PORT=${ZIGZAG_KINESIS_PORT:-18101} ZIGZAG_KINESIS_TLS_PORT=${ZIGZAG_KINESIS_TLS_PORT:-18103}
export ZIGZAG_EMULATORS_RUN=${ZIGZAG_EMULATORS_RUN:-$HOME/.cache/zigzag-emulators/run-bench}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	bash "$ROOT/deploy/local/down.sh" >&2 || true
	# ZIGZAG_BENCH_SERVE_LOG=FILE keeps gather serve's log, each plan explained.
	[[ -n ${ZIGZAG_BENCH_SERVE_LOG:-} ]] && cp "$WORK/serve.log" "$ZIGZAG_BENCH_SERVE_LOG"
	rm -rf "$WORK"
}
trap cleanup EXIT
eval "$(bash "$ROOT/deploy/local/up.sh" --kinesalite-only --stream clicks --shards 2)"

NOW=$(date +%s)
DAY_AGO=$((NOW - 86400))
# A day of history on the stream, then live events from now on.
echo "# history: $HISTORY events over the last 24 h" >&2
"$BIN/loadgen" --sink kinesis:clicks --records "$HISTORY" --start "$((DAY_AGO * 1000))" --span 1d \
	--truth "$WORK/history.json" >&2
INGEST_METRICS=127.0.0.1:${ZIGZAG_BENCH_INGEST_PORT:-18199}
"$BIN/ingest" --kinesis clicks --dynamodb zigzag-bench --start trim-horizon --metrics-addr "$INGEST_METRICS" \
	>"$WORK/ingest.log" 2>&1 &
PIDS+=($!)
INGEST_START=$(date +%s)
LIVE_SECONDS=$(((MINUTES * $(wc -w <<<"$VIEWERS") + 5) * 60))
"$BIN/loadgen" --sink kinesis:clicks --rate "$RATE" --duration "${LIVE_SECONDS}s" --start "$((NOW * 1000))" \
	--span "${LIVE_SECONDS}s" --seed 2 --truth "$WORK/live.json" >"$WORK/loadgen.log" 2>&1 &
PIDS+=($!)
# Until ingest has read the history (at its own pace) and written it: its
# first flush holds the whole backlog of minutes, and the hour and day
# items follow at their 5-minute cadence.
for _ in $(seq 1 720); do
	sleep 5
	m=$(curl -s "http://$INGEST_METRICS/metrics" || true)
	read=$(awk '/^zigzag_ingest_records_total/ { print $2 }' <<<"$m")
	flushes=$(awk '/^zigzag_ingest_flushes_total/ { print $2 }' <<<"$m")
	echo "# ingest has read ${read:-0} records in ${flushes:-0} flushes" >&2
	# The backlog row: as soon as ingest reads (it made the table).
	((BACKLOG)) && [[ ${read%.*} -gt 0 ]] 2>/dev/null && break
	# Settled: the history read and flushed, hour and day items included
	# (their 5-minute cadence passed once since).
	[[ ${read%.*} -ge $HISTORY && ${flushes%.*} -ge 2 && $(($(date +%s) - INGEST_START)) -ge 330 ]] 2>/dev/null &&
		break
done
((BACKLOG)) || sleep 30

"$BIN/gather" --dynamodb zigzag-bench serve --listen 127.0.0.1:0 --cache-bytes "$CACHE" --recheck "$RECHECK" \
	--max-queries "$MAX_QUERIES" ${ZIGZAG_BENCH_SERVE_LOG:+--explain} \
	2>"$WORK/serve.log" &
PIDS+=($!)
for _ in $(seq 1 300); do
	ADDR=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.log" | head -1 || true)
	[[ -n $ADDR ]] && break
	sleep 0.2
done
echo "# gather serve at $ADDR (cache $CACHE, recheck $RECHECK); live traffic $RATE events/s" >&2
if ((BACKLOG)); then
	# What ingest has done, every 15 s, while the viewers look on.
	(
		START=$(date +%s)
		while sleep 15; do
			m=$(curl -s "http://$INGEST_METRICS/metrics" || true)
			read=$(awk '/^zigzag_ingest_records_total/ { print $2 }' <<<"$m")
			flushes=$(awk '/^zigzag_ingest_flushes_total/ { print $2 }' <<<"$m")
			echo "# +$(($(date +%s) - START)) s: ingest has read ${read:-0} records in ${flushes:-0} flushes" >&2
		done
	) &
	PIDS+=($!)
fi
for n in $VIEWERS; do
	python3 "$HERE/viewers.py" --url "$ADDR" --viewers "$n" --seconds "$((MINUTES * 60))" \
		$( ((MOVING)) && echo --moving)
done
