#!/usr/bin/env bash
# Starts the local AWS emulators in the background, on 127.0.0.1 only:
#   DynamoDB Local   port $ZIGZAG_DYNAMODB_PORT   (default 18000)
#   kinesis-local    port $ZIGZAG_KINESIS_PORT    (default 18001, plain HTTP;
#                    its TLS port, which cannot be disabled: $ZIGZAG_KINESIS_TLS_PORT, default 18003,
#                    with install.sh's certificate for 127.0.0.1; HTTP/2 there serves SubscribeToShard)
#   kinesalite       port $ZIGZAG_KINESALITE_PORT (default 18002; only with --kinesalite)
# Logs and pid files go to $ZIGZAG_EMULATORS_RUN (default ~/.cache/zigzag-emulators/run).
# Idempotent: an emulator already running and answering is reused.
#
# Usage: deploy/local/up.sh [options]
#   --kinesalite        also start kinesalite (~15x faster; MillisBehindLatest always 0)
#                       (or ZIGZAG_KINESALITE=1)
#   --kinesalite-only   start kinesalite instead of kinesis-local (or ZIGZAG_KINESIS_LOCAL=0)
#   --no-dynamodb       do not start DynamoDB Local (or ZIGZAG_DYNAMODB=0)
#   --stream NAME       create Kinesis stream NAME (repeatable) on every Kinesis emulator
#                       started, and wait until it is ACTIVE
#   --shards N          shard count for --stream (default 4)
#   --check             list DynamoDB tables and Kinesis streams to prove they answer
#   -h, --help          this help
#
# Prints the environment to use on stdout (so `eval "$(deploy/local/up.sh)"`
# works) and writes it to $RUN_DIR/env.sh; all messages go to stderr.
# Tables are not created here: the zigzag binaries create/validate them.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

usage() {
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

WANT_DYNAMODB=${ZIGZAG_DYNAMODB:-1}
WANT_KINESIS_LOCAL=${ZIGZAG_KINESIS_LOCAL:-1}
WANT_KINESALITE=${ZIGZAG_KINESALITE:-0}
STREAMS=()
SHARDS=4
CHECK=0
while (($#)); do
	case $1 in
	--kinesalite) WANT_KINESALITE=1 ;;
	--kinesalite-only)
		WANT_KINESALITE=1
		WANT_KINESIS_LOCAL=0
		;;
	--no-dynamodb) WANT_DYNAMODB=0 ;;
	--stream)
		(($# >= 2)) || zz_die "--stream needs a NAME"
		STREAMS+=("$2")
		shift
		;;
	--stream=*) STREAMS+=("${1#*=}") ;;
	--shards)
		(($# >= 2)) || zz_die "--shards needs a number"
		SHARDS=$2
		shift
		;;
	--shards=*) SHARDS=${1#*=} ;;
	--check) CHECK=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) zz_die "unknown argument '$1' (try --help)" ;;
	esac
	shift
done

for v in WANT_DYNAMODB WANT_KINESIS_LOCAL WANT_KINESALITE; do
	[[ ${!v} == 0 || ${!v} == 1 ]] || zz_die "$v must be 0 or 1, got '${!v}'"
done
[[ $SHARDS =~ ^[1-9][0-9]*$ ]] || zz_die "--shards must be a positive integer, got '$SHARDS'"
for s in "${STREAMS[@]}"; do
	[[ $s =~ ^[a-zA-Z0-9_.-]{1,128}$ ]] || zz_die "invalid stream name '$s' (allowed: a-z A-Z 0-9 _ . -, at most 128)"
done
((${#STREAMS[@]} == 0 || WANT_KINESIS_LOCAL || WANT_KINESALITE)) || zz_die "--stream needs a Kinesis emulator"
zz_check_port_value ZIGZAG_DYNAMODB_PORT "$ZZ_DYNAMODB_PORT"
zz_check_port_value ZIGZAG_KINESIS_PORT "$ZZ_KINESIS_PORT"
zz_check_port_value ZIGZAG_KINESIS_TLS_PORT "$ZZ_KINESIS_TLS_PORT"
zz_check_port_value ZIGZAG_KINESALITE_PORT "$ZZ_KINESALITE_PORT"
dups=$(printf '%s\n' "$ZZ_DYNAMODB_PORT" "$ZZ_KINESIS_PORT" "$ZZ_KINESIS_TLS_PORT" "$ZZ_KINESALITE_PORT" | sort | uniq -d)
[[ -z $dups ]] || zz_die "the emulator ports must differ; $dups is used twice"
command -v curl >/dev/null 2>&1 || zz_die "curl not found"
command -v ss >/dev/null 2>&1 || zz_warn "ss not found: cannot verify that the emulators listen on 127.0.0.1 only"

mkdir -p "$ZZ_RUN_DIR"
zz_lock "$ZZ_RUN_DIR/.lock"

# ---- generic start/wait --------------------------------------------------------

show_log_tail() { # NAME
	local log=$ZZ_RUN_DIR/$1.log
	if [[ -s $log ]]; then
		zz_log "last lines of $log:"
		tail -n 25 "$log" | sed 's/^/    /' >&2
	else
		zz_log "$log is empty"
	fi
}

# Stops a process we just started and failed to bring up.
abort_start() { # NAME PID MESSAGE
	show_log_tail "$1"
	kill -TERM "$2" 2>/dev/null || true
	sleep 1
	kill -KILL "$2" 2>/dev/null || true
	rm -f "$ZZ_RUN_DIR/$1.pid"
	zz_die "$3"
}

# Fails unless every listener on PORT is on 127.0.0.1 (strict) or warns (warn).
check_loopback() { # NAME PORT strict|warn
	command -v ss >/dev/null 2>&1 || return 0
	zz_loopback_only "$2" && return 0
	local addrs
	addrs=$(zz_listen_addrs "$2" | tr '\n' ' ')
	if [[ $3 == strict ]]; then
		abort_start "$1" "$(zz_running_pid "$1")" "$1 listens on $addrs- not on 127.0.0.1 only; stopped it"
	fi
	zz_warn "$1 listens on ${addrs}(all interfaces); connect to it via 127.0.0.1 only"
}

# Waits until NAME (pid PID) answers HTTP on 127.0.0.1:PORT.
wait_ready() { # NAME PORT PID
	local name=$1 port=$2 pid=$3 deadline=$((SECONDS + ZZ_START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			abort_start "$name" "$pid" "$name (pid $pid) exited during start-up"
		fi
		zz_port_answers "$port" && return 0
		sleep 0.1
	done
	abort_start "$name" "$pid" "$name did not answer on $ZZ_HOST:$port within ${ZZ_START_TIMEOUT}s; stopped it"
}

# launch NAME PORT [EXTRA_PORT] -- COMMAND...
# Reuses a running instance, otherwise starts COMMAND in the background with
# its output in NAME.log and its pid in NAME.pid, then waits for PORT.
launch() {
	local name=$1 port=$2 extra_port='' pid t0 p
	shift 2
	if [[ $1 != -- ]]; then
		extra_port=$1
		shift
	fi
	shift # --
	pid=$(zz_running_pid "$name")
	if [[ -n $pid ]]; then
		if zz_port_answers "$port"; then
			zz_log "$name already running (pid $pid, $(zz_rss_mib "$pid")) on $ZZ_HOST:$port; reusing it"
			return 0
		fi
		zz_log "$name (pid $pid) is running but not answering yet; waiting"
		wait_ready "$name" "$port" "$pid"
		return 0
	fi
	for p in "$port" $extra_port; do
		if zz_port_listening "$p"; then
			ss -ltnp "sport = :$p" 2>/dev/null | sed 's/^/    /' >&2 || true
			zz_die "port $p (for $name) is already in use by another process; stop it or set another port (see --help)"
		fi
	done
	t0=$(zz_now_ms)
	: >"$ZZ_RUN_DIR/$name.log"
	# The subshell execs nohup, which execs COMMAND: $! is COMMAND's pid.
	# 9>&- : the emulator must not inherit (and so hold forever) the lock fd.
	(cd "$ZZ_RUN_DIR" && exec nohup "$@" >>"$ZZ_RUN_DIR/$name.log" 2>&1 </dev/null 9>&-) &
	pid=$!
	printf '%s\n' "$pid" >"$ZZ_RUN_DIR/$name.pid"
	wait_ready "$name" "$port" "$pid"
	zz_log "$name started on $ZZ_HOST:$port in $(zz_elapsed "$t0") (pid $pid, $(zz_rss_mib "$pid"))"
}

# ---- the emulators -------------------------------------------------------------

start_dynamodb() {
	local home shim=$ZZ_DYNAMODB_SHIM_DIR cmd
	home=$(zz_dynamodb_home) || zz_die "DynamoDB Local is not installed in $ZZ_DYNAMODB_PREFIX; run deploy/local/install.sh"
	zz_require_java
	# DDB_LOCAL_TELEMETRY=0 and -disableTelemetry: DynamoDB Local must not phone home.
	cmd=(env DDB_LOCAL_TELEMETRY=0 "$ZZ_JAVA" -Djava.net.preferIPv4Stack=true
		"-Djava.library.path=$home/DynamoDBLocal_lib")
	if [[ ${ZIGZAG_DYNAMODB_SHIM:-1} != 0 && -f $shim/DynamoDBLocalLoopback.class ]]; then
		cmd+=("-Dzigzag.bindHost=$ZZ_HOST" -cp "$shim:$home/DynamoDBLocal.jar" DynamoDBLocalLoopback)
		DYNAMODB_LOOPBACK=strict
	else
		zz_warn "running the plain DynamoDB Local jar: it listens on ALL interfaces (no host option);" \
			"only ever connect via $ZZ_HOST (install.sh builds a loopback shim when javac is available)"
		cmd+=(-jar "$home/DynamoDBLocal.jar")
		DYNAMODB_LOOPBACK=warn
	fi
	cmd+=(-inMemory -sharedDb -disableTelemetry -port "$ZZ_DYNAMODB_PORT")
	launch dynamodb "$ZZ_DYNAMODB_PORT" -- "${cmd[@]}"
	check_loopback dynamodb "$ZZ_DYNAMODB_PORT" "$DYNAMODB_LOOPBACK"
}

start_kinesis_local() {
	local dir=$ZZ_KINESIS_PATCHED_DIR
	[[ -f $dir/main.js && -f $ZZ_KINESIS_TLS_DIR/server.json && -f $ZZ_KINESIS_TLS_DIR/ca.pem ]] ||
		zz_die "patched kinesis-local or its TLS certificate not found in $dir; run deploy/local/install.sh"
	zz_require_node
	# Every setting is passed explicitly so that nothing from the caller's
	# environment (AWS_ACCOUNT_ID, AWS_REGION, INITIALIZE_STREAMS, ...) leaks in.
	launch kinesis-local "$ZZ_KINESIS_PORT" "$ZZ_KINESIS_TLS_PORT" -- \
		env -u INITIALIZE_STREAMS \
		KINESIS_MOCK_PLAIN_PORT="$ZZ_KINESIS_PORT" \
		KINESIS_MOCK_TLS_PORT="$ZZ_KINESIS_TLS_PORT" \
		KINESIS_MOCK_CERT_PATH="$ZZ_KINESIS_TLS_DIR/server.json" \
		AWS_ACCOUNT_ID=000000000000 \
		AWS_REGION="$ZZ_REGION" \
		CREATE_STREAM_DURATION="${ZIGZAG_CREATE_STREAM_MS:-500}ms" \
		DELETE_STREAM_DURATION="${ZIGZAG_CREATE_STREAM_MS:-500}ms" \
		UPDATE_SHARD_COUNT_DURATION="${ZIGZAG_CREATE_STREAM_MS:-500}ms" \
		SHARD_LIMIT="${ZIGZAG_KINESIS_SHARD_LIMIT:-50}" \
		SHOULD_PERSIST_DATA=false \
		LOAD_DATA_IF_EXISTS=false \
		PERSIST_PATH="$ZZ_RUN_DIR/kinesis-local-data" \
		LOG_LEVEL="${ZIGZAG_KINESIS_LOG_LEVEL:-WARN}" \
		node "$dir/main.js"
	check_loopback kinesis-local "$ZZ_KINESIS_PORT" strict
	check_loopback kinesis-local "$ZZ_KINESIS_TLS_PORT" strict
}

start_kinesalite() {
	local pkg=$ZZ_KINESALITE_PREFIX/node_modules/kinesalite
	[[ $(zz_installed_version "$ZZ_KINESALITE_PREFIX" kinesalite) == "$ZZ_KINESALITE_VERSION" ]] ||
		zz_die "kinesalite $ZZ_KINESALITE_VERSION is not installed in $ZZ_KINESALITE_PREFIX; run deploy/local/install.sh"
	zz_require_node
	launch kinesalite "$ZZ_KINESALITE_PORT" -- \
		node "$HERE/kinesalite-loopback.js" "$pkg" "$ZZ_KINESALITE_PORT" \
		"${ZIGZAG_CREATE_STREAM_MS:-500}" "${ZIGZAG_KINESIS_SHARD_LIMIT:-50}"
	check_loopback kinesalite "$ZZ_KINESALITE_PORT" strict
}

# ---- API helpers ---------------------------------------------------------------

# api PORT SERVICE OPERATION JSON: sets API_CODE and API_BODY.
api() {
	local out
	out=$(zz_api "$@") || zz_die "$3 on $ZZ_HOST:$1 failed (no HTTP answer)"
	API_CODE=${out##*$'\n'}
	API_BODY=${out%$'\n'*}
}

create_stream() { # LABEL PORT NAME SHARDS
	local label=$1 port=$2 name=$3 shards=$4 status have t0 deadline
	t0=$(zz_now_ms)
	api "$port" kinesis CreateStream "{\"StreamName\":\"$name\",\"ShardCount\":$shards}"
	if [[ $API_CODE == 200 ]]; then
		zz_log "$label: creating stream $name with $shards shard(s)"
	elif [[ $API_BODY == *ResourceInUseException* ]]; then
		zz_log "$label: stream $name already exists"
	else
		zz_die "$label: CreateStream $name failed (HTTP $API_CODE): $API_BODY"
	fi
	deadline=$((SECONDS + 30))
	while :; do
		api "$port" kinesis DescribeStreamSummary "{\"StreamName\":\"$name\"}"
		[[ $API_CODE == 200 ]] || zz_die "$label: DescribeStreamSummary $name failed (HTTP $API_CODE): $API_BODY"
		status=$(grep -oE '"StreamStatus": *"[A-Z_]+"' <<<"$API_BODY" | grep -oE '[A-Z_]+"$' | tr -d '"') || true
		[[ $status == ACTIVE ]] && break
		((SECONDS < deadline)) || zz_die "$label: stream $name still '${status:-?}' after 30s"
		sleep 0.1
	done
	have=$(grep -oE '"OpenShardCount": *[0-9]+' <<<"$API_BODY" | grep -oE '[0-9]+$') || true
	if [[ $have != "$shards" ]]; then
		zz_warn "$label: stream $name has ${have:-?} open shard(s), not $shards (it existed before; delete it or restart the emulators)"
	fi
	zz_log "$label: stream $name ACTIVE with ${have:-?} shard(s) after $(zz_elapsed "$t0")"
}

# ---- main --------------------------------------------------------------------------

t_all=$(zz_now_ms)
KINESIS_TARGETS=()
if ((WANT_DYNAMODB)); then start_dynamodb; fi
if ((WANT_KINESIS_LOCAL)); then
	start_kinesis_local
	KINESIS_TARGETS+=("kinesis-local:$ZZ_KINESIS_PORT")
fi
if ((WANT_KINESALITE)); then
	start_kinesalite
	KINESIS_TARGETS+=("kinesalite:$ZZ_KINESALITE_PORT")
fi

for stream in "${STREAMS[@]}"; do
	for target in "${KINESIS_TARGETS[@]}"; do
		create_stream "${target%%:*}" "${target##*:}" "$stream" "$SHARDS"
	done
done

if ((CHECK)); then
	if ((WANT_DYNAMODB)); then
		api "$ZZ_DYNAMODB_PORT" dynamodb ListTables '{}'
		[[ $API_CODE == 200 ]] || zz_die "dynamodb: ListTables failed (HTTP $API_CODE): $API_BODY"
		zz_log "dynamodb: ListTables -> $API_BODY"
	fi
	for target in "${KINESIS_TARGETS[@]}"; do
		api "${target##*:}" kinesis ListStreams '{}'
		[[ $API_CODE == 200 ]] || zz_die "${target%%:*}: ListStreams failed (HTTP $API_CODE): $API_BODY"
		zz_log "${target%%:*}: ListStreams -> $API_BODY"
	done
fi

# ---- environment -------------------------------------------------------------------

env_lines() {
	echo "# zigzag local AWS emulators (deploy/local/up.sh); all on $ZZ_HOST"
	echo "export AWS_ACCESS_KEY_ID=$ZZ_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$ZZ_SECRET_ACCESS_KEY AWS_REGION=$ZZ_REGION"
	echo "export AWS_EC2_METADATA_DISABLED=true"
	[[ -n $(zz_running_pid dynamodb) ]] &&
		echo "export AWS_ENDPOINT_URL_DYNAMODB=http://$ZZ_HOST:$ZZ_DYNAMODB_PORT"
	local kl='' ks=''
	[[ -n $(zz_running_pid kinesis-local) ]] && kl=http://$ZZ_HOST:$ZZ_KINESIS_PORT
	[[ -n $(zz_running_pid kinesalite) ]] && ks=http://$ZZ_HOST:$ZZ_KINESALITE_PORT
	if [[ -n $kl ]]; then
		echo "# kinesis-local's TLS port (HTTP/2: SubscribeToShard) and the CA to trust in a test's client only"
		echo "export ZIGZAG_KINESIS_TLS_ENDPOINT=https://$ZZ_HOST:$ZZ_KINESIS_TLS_PORT ZIGZAG_KINESIS_CA=$ZZ_KINESIS_TLS_DIR/ca.pem"
	fi
	if [[ -n $kl && ($WANT_KINESIS_LOCAL == 1 || -z $ks) ]]; then
		echo "export AWS_ENDPOINT_URL_KINESIS=$kl"
	elif [[ -n $ks ]]; then
		echo "export AWS_ENDPOINT_URL_KINESIS=$ks"
	fi
	if [[ -n $ks ]]; then
		echo "# kinesalite (fast; MillisBehindLatest always 0): AWS_ENDPOINT_URL_KINESIS=\$ZIGZAG_KINESALITE_ENDPOINT"
		echo "export ZIGZAG_KINESALITE_ENDPOINT=$ks"
	fi
	return 0
}

ENV_TEXT=$(env_lines)
printf '%s\n' "$ENV_TEXT" >"$ZZ_RUN_DIR/env.sh.tmp"
mv "$ZZ_RUN_DIR/env.sh.tmp" "$ZZ_RUN_DIR/env.sh"
zz_log "ready after $(zz_elapsed "$t_all"). Environment (also in $ZZ_RUN_DIR/env.sh; source it):"
printf '%s\n' "$ENV_TEXT"
