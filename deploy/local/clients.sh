#!/usr/bin/env bash
# Installs the real clients and servers the tests talk to, from Debian's
# packages, once: prometheus (the server, and promtool), the oracle and a
# client of `gather serve` (app/tests/serve_prometheus.rs), and chromium,
# which drives the live page headless (app/tests/serve_page.rs). Services
# are never started by the install (a policy-rc.d denies it while it
# runs): the tests start them on 127.0.0.1 themselves. Idempotent.
#
# Usage: deploy/local/clients.sh
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deploy/local/clients.sh: installing ${missing[*]} needs root or sudo" >&2; exit 1; }
  sudo=(sudo)
fi

echo "== installing ${missing[*]} from Debian's packages (services not started)" >&2
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod +x "$policy"
  added_policy=1
fi
cleanup() { if ((added_policy)); then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

install() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2; }
if ! install "${missing[@]}"; then
  "${sudo[@]}" apt-get update -q >&2
  install "${missing[@]}"
fi
# The package's own service, if an init system started it anyway, must not
# listen on every interface while the tests run.
"${sudo[@]}" sh -c 'command -v systemctl >/dev/null 2>&1 && systemctl disable --now prometheus 2>/dev/null || true'
echo "installed: ${missing[*]}" >&2
