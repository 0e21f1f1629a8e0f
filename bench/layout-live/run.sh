#!/usr/bin/env bash
# Live ingest's flush duration while a layout change is filled
# (BENCHMARKS.md, "Layout changes, filled": the live rows). On DynamoDB
# Local on loopback, which it starts and stops:
#  1. history: `loadgen` writes --history records of shipped traffic (a day
#     of event time) into table layoutlive, shipped layout;
#  2. live: `loadgen --sink files:-` piped through a pacer at --rate records
#     a second into a file one `ingest --follow` reads into the same table
#     (JSON logs: every flush and its duration);
#  3. after --baseline seconds, `gather layout apply` adds by_campaign
#     (minute, hour), summed from cc: the running worker adopts it (no
#     restart), then the fill reads the history while ingest goes on;
#  4. flush durations (p50, p99, max) before the apply and while the fill
#     runs, from the worker's log (kept in $KEEP, default /tmp/layout-live).
#
# The worker flushes every --flush-ms (1 s: enough flushes to take a p99
# of while the fill runs), and the fill is paced at --wcu-per-sec.
#
# Usage: bench/layout-live/run.sh [--history 300000] [--rate 200] [--baseline 120]
#                                 [--flush-ms 1000] [--wcu-per-sec 1000]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
HISTORY=300000 RATE=200 BASELINE=120 FLUSH_MS=1000 WCU=1000
while (($#)); do
	case $1 in
	--history) HISTORY=$2 && shift 2 ;;
	--rate) RATE=$2 && shift 2 ;;
	--baseline) BASELINE=$2 && shift 2 ;;
	--flush-ms) FLUSH_MS=$2 && shift 2 ;;
	--wcu-per-sec) WCU=$2 && shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" && exit 0 ;;
	*) echo "unknown option $1 (see --help)" >&2 && exit 2 ;;
	esac
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
(cd "$ROOT" && cargo build --release -q -p zigzag-app --bins)
BIN=$CARGO_TARGET_DIR/release

export ZIGZAG_DYNAMODB_PORT=${ZIGZAG_DYNAMODB_PORT:-18200}
export ZIGZAG_EMULATORS_RUN=${ZIGZAG_EMULATORS_RUN:-$HOME/.cache/zigzag-emulators/run-layout-live}
export ZIGZAG_KINESIS_LOCAL=0
WORK=$(mktemp -d)
PIDS=()
KEEP=${KEEP:-/tmp/layout-live}
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	mkdir -p "$KEEP" && cp "$WORK"/*.log "$WORK"/*.toml "$KEEP"/ 2>/dev/null || true
	bash "$ROOT/deploy/local/down.sh" >&2 || true
	rm -rf "$WORK"
}
trap cleanup EXIT
bash "$ROOT/deploy/local/install.sh" >&2
eval "$(bash "$ROOT/deploy/local/up.sh")"
TABLE=layoutlive
cd "$WORK"

echo "history: $HISTORY records into $TABLE" >&2
"$BIN/loadgen" --records "$HISTORY" --seed 1 --sink ingest --dynamodb "$TABLE" --truth history.json >&2

# Live events at wall-clock time, paced; the worker takes the table's layout.
LIVE_SECONDS=$((BASELINE * 4 + 600))
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
: >live.jsonl
("$BIN/loadgen" --sink files:- --shards 1 --records $((RATE * LIVE_SECONDS)) --seed 2 --start "$START" \
	--span "${LIVE_SECONDS}s" --truth live-truth.json 2>/dev/null |
	python3 -u -c '
import sys, time
rate = float(sys.argv[1]); t0 = time.monotonic(); n = 0
# Bytes: malformed records are not always UTF-8.
with open("live.jsonl", "ab", buffering=0) as out:
    for line in sys.stdin.buffer:
        n += 1
        ahead = n / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
        out.write(line)
' "$RATE") &
PIDS+=($!)
"$BIN/ingest" --dynamodb "$TABLE" --input live.jsonl --follow --stream live --log-format json \
	--flush-interval-ms "$FLUSH_MS" --dead-letters live-dead.jsonl 2>ingest.log &
PIDS+=($!)

sleep "$BASELINE"
"$BIN/gather" --dynamodb "$TABLE" layout show >v1.toml
cp v1.toml v2.toml
printf '\n[[projection]]\nname = "by_campaign"\ndimensions = ["campaign"]\nrollups = ["minute", "hour"]\n' >>v2.toml
APPLIED=$(date +%s.%N)
"$BIN/gather" --dynamodb "$TABLE" layout apply v2.toml --wcu-per-sec "$WCU" 2>&1 | tee apply.log >&2
FILLED=$(date +%s.%N)
sleep 20
"$BIN/gather" --dynamodb "$TABLE" layout status >&2

python3 - "$APPLIED" "$FILLED" <<'PY'
import json, sys, datetime
applied, filled = float(sys.argv[1]), float(sys.argv[2])
before, during, adopted, slowest = [], [], None, []
for line in open("ingest.log"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    f = e.get("fields", {})
    t = datetime.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    if "adopting" in f.get("message", "") and adopted is None:
        adopted = t
    if f.get("message") == "flushed":
        (before if t < applied else during if t <= filled else []).append(f["ms"])
        if applied <= t <= filled:
            slowest.append((f["ms"], round(t - applied, 1), f.get("keys")))
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
for name, xs in (("before the apply", before), ("apply and fill", during)):
    print(f"{name}: {len(xs)} flushes, p50 {q(xs, .5)} ms, p99 {q(xs, .99)} ms, max {max(xs) if xs else 'n/a'} ms")
if adopted:
    print(f"adopted {adopted - applied:.1f} s after the apply began; apply and fill took {filled - applied:.1f} s")
print("slowest flushes during (ms, s after the apply began, keys):", sorted(slowest, reverse=True)[:3])
PY
