#!/usr/bin/env bash
# Stops the emulators that deploy/local/up.sh started (SIGTERM, then SIGKILL
# after $ZIGZAG_STOP_TIMEOUT seconds, default 5), and removes their pid files
# and $RUN_DIR/env.sh. Logs are kept. Safe to call when nothing runs.
# Only processes recorded in the pid files (and still looking like the
# emulator) are signalled.
#
# Usage: deploy/local/down.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

case ${1:-} in
'') ;;
-h | --help)
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
	exit 0
	;;
*) zz_die "unknown argument '$1' (try --help)" ;;
esac

if [[ ! -d $ZZ_RUN_DIR ]]; then
	zz_log "nothing to stop ($ZZ_RUN_DIR does not exist)"
	exit 0
fi
zz_lock "$ZZ_RUN_DIR/.lock"

# 1. SIGTERM to every emulator of ours that runs.
names=() pids=()
for name in kinesalite kinesis-local dynamodb; do
	pid=$(zz_running_pid "$name")
	if [[ -z $pid ]]; then
		rm -f "$ZZ_RUN_DIR/$name.pid"
		continue
	fi
	zz_log "stopping $name (pid $pid, $(zz_rss_mib "$pid"))"
	kill -TERM "$pid" 2>/dev/null || true
	names+=("$name")
	pids+=("$pid")
done
rm -f "$ZZ_RUN_DIR/env.sh"
if ((${#pids[@]} == 0)); then
	zz_log "nothing was running"
	exit 0
fi

alive() { # prints the indexes of the processes still running
	local i
	for i in "${!pids[@]}"; do
		if kill -0 "${pids[i]}" 2>/dev/null; then printf '%s\n' "$i"; fi
	done
}

# 2. Wait for them; 3. SIGKILL what is left.
t0=$(zz_now_ms)
deadline=$((SECONDS + ZZ_STOP_TIMEOUT))
while [[ -n $(alive) ]] && ((SECONDS < deadline)); do
	sleep 0.1
done
for i in $(alive); do
	zz_warn "${names[i]} (pid ${pids[i]}) still running after ${ZZ_STOP_TIMEOUT}s; sending SIGKILL"
	kill -KILL "${pids[i]}" 2>/dev/null || true
done
for _ in $(seq 1 30); do
	[[ -z $(alive) ]] && break
	sleep 0.1
done
left=$(alive)
for i in $left; do
	zz_warn "could not stop ${names[i]} (pid ${pids[i]})"
done
for i in "${!names[@]}"; do
	[[ $'\n'$left$'\n' == *$'\n'$i$'\n'* ]] || rm -f "$ZZ_RUN_DIR/${names[i]}.pid"
done
[[ -z $left ]] || zz_die "some emulators did not stop"
zz_log "stopped ${names[*]} in $(zz_elapsed "$t0"); logs kept in $ZZ_RUN_DIR"
