#!/usr/bin/env bash
# Reading at the stream's limit (BENCHMARKS.md, "Reading at the stream's
# limit"): one release `ingest` (shipped layout, SQLite) reads N shards
# while `loadgen` writes each at 1 MB/s of ~153 B events, KPL-packed (a
# shard takes 1,000 records/s, so 1 MB/s of small events needs the KPL).
# Prints the producer's rate, how long after the producer ingest caught up,
# the CPU seconds of ingest and of the emulator, and `gather check`.
#
# Usage: bench/stream-limit/run.sh N polling|fan-out [SECONDS]
#   polling: kinesalite (GetRecords); fan-out: kinesis-local's TLS port.
#   PER_SHARD=6850 events/s per shard (1 MB/s); IDLE=4 (ingest --idle-exit, s).
# Starts the emulators on loopback (ports 182xx) and stops them at the end.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
(($# >= 2)) || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2; }
N=$1 MODE=$2 SECS=${3:-60}
[[ $MODE == polling || $MODE == fan-out ]] || { echo "MODE is polling or fan-out" >&2; exit 2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
(cd "$ROOT" && cargo build --release -q -p zigzag-app --bins)
R=$CARGO_TARGET_DIR/release
export ZIGZAG_DYNAMODB_PORT=18200 ZIGZAG_KINESIS_PORT=18201 ZIGZAG_KINESALITE_PORT=18202 ZIGZAG_KINESIS_TLS_PORT=18203
export ZIGZAG_EMULATORS_RUN=$HOME/.cache/zigzag-emulators/run-stream-limit
WORK=$(mktemp -d)
trap 'bash "$ROOT/deploy/local/down.sh" >&2 || true; rm -rf "$WORK"' EXIT
bash "$ROOT/deploy/local/install.sh" >&2
eval "$(bash "$ROOT/deploy/local/up.sh" --kinesalite --no-dynamodb)"
unset AWS_CA_BUNDLE
if [[ $MODE == polling ]]; then
	export AWS_ENDPOINT_URL_KINESIS=$ZIGZAG_KINESALITE_ENDPOINT
	EXTRA=() EMU=kinesalite-loopback
else
	export AWS_ENDPOINT_URL_KINESIS=$ZIGZAG_KINESIS_TLS_ENDPOINT AWS_CA_BUNDLE=$ZIGZAG_KINESIS_CA
	EXTRA=(--consumer stream-limit) EMU=kinesis-local
fi
S=limit-$MODE-$N
RATE=$((N * ${PER_SHARD:-6850}))
"$R/loadgen" --sink "kinesis:$S" --create-stream "$N" --records 1 --truth "$WORK/first.json" >/dev/null 2>&1
cpu() { awk '{ print $14 + $15 }' "/proc/$(pgrep -f "$EMU" | head -1)/stat"; }
k0=$(cpu)
t0=$(date +%s.%N)
"$R/loadgen" --sink "kinesis:$S" --rate "$RATE" --duration "${SECS}s" --start "$(date +%s%3N)" --span "${SECS}s" \
	--kpl 51200 --partition-key random --shards "$N" --truth "$WORK/truth.json" >"$WORK/loadgen.log" 2>&1 &
LP=$!
sleep 3 # data on the stream before ingest's --idle-exit clock starts
/usr/bin/time -f "ingest cpu: user %U s, sys %S s, wall %e s" "$R/ingest" --kinesis "$S" "${EXTRA[@]}" --db "$WORK/agg.db" \
	--idle-exit "${IDLE:-4}s" --dead-letters "$WORK/dead.jsonl" >"$WORK/ingest.log" 2>&1 &
IP=$!
wait "$LP"
t1=$(date +%s.%N)
wait "$IP" || true
t2=$(date +%s.%N)
k1=$(cpu)
echo "N=$N $MODE, $RATE events/s for $SECS s"
tail -1 "$WORK/loadgen.log"
grep "^ingest:" "$WORK/ingest.log" | cut -c1-200
grep "ingest cpu" "$WORK/ingest.log"
echo "producer ran $(echo "$t1 - $t0" | bc) s; ingest caught up $(echo "$t2 - $t1 - ${IDLE:-4}" | bc) s after it; emulator cpu $(echo "($k1 - $k0) / 100" | bc -l | cut -c1-6) s"
"$R/gather" --db "$WORK/agg.db" check --truth "$WORK/truth.json" 2>&1 | tail -1
