#!/usr/bin/env bash
# Freshness, end to end (BENCHMARKS.md, "Freshness"): put → the first
# `gather serve` answer that includes the event, p50/p99, with GetRecords
# polling and with enhanced fan-out, at the shipped cadence (minute items
# flushed every 10 s), and what each stage costs. Runs
# tests/examples/freshness.rs once per mode against the emulators on
# loopback (kinesis-local: plain port for polling, TLS port for fan-out;
# DynamoDB Local), which it starts and stops.
#
# Usage: bench/freshness/run.sh [--seconds 180] [--rate 200] [--modes "polling fan-out"]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SECONDS_EACH=180 RATE=200 MODES="polling fan-out"
while (($#)); do
	case $1 in
	--seconds) SECONDS_EACH=$2 && shift 2 ;;
	--rate) RATE=$2 && shift 2 ;;
	--modes) MODES=$2 && shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" && exit 0 ;;
	*) echo "unknown option $1 (see --help)" >&2 && exit 2 ;;
	esac
done

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
(cd "$ROOT" && cargo build --release -q -p zigzag-app --bins && cargo build --release -q -p zigzag-tests --example freshness)

export ZIGZAG_DYNAMODB_PORT=${ZIGZAG_DYNAMODB_PORT:-18100} ZIGZAG_KINESALITE_PORT=${ZIGZAG_KINESALITE_PORT:-18102}
export ZIGZAG_KINESIS_PORT=${ZIGZAG_KINESIS_PORT:-18101} ZIGZAG_KINESIS_TLS_PORT=${ZIGZAG_KINESIS_TLS_PORT:-18103}
export ZIGZAG_EMULATORS_RUN=${ZIGZAG_EMULATORS_RUN:-$HOME/.cache/zigzag-emulators/run-bench}
trap 'bash "$ROOT/deploy/local/down.sh" >&2 || true' EXIT
bash "$ROOT/deploy/local/install.sh" >&2
eval "$(bash "$ROOT/deploy/local/up.sh")"
# Only the example's clients trust the emulator's CA (it passes it on).
unset AWS_CA_BUNDLE
for mode in $MODES; do
	"$CARGO_TARGET_DIR/release/examples/freshness" "$mode" "$SECONDS_EACH" "$RATE"
done
