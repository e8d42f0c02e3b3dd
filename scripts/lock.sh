#!/usr/bin/env bash
# Write the lock files in requirements/: every package of the base install (base.txt), of the [test] extra
# (test.txt), of the [server] extra (server.txt) and of an `orchestrator init` project's tests (init-tests.txt),
# and the setuptools that builds the project, each pinned to one release with the hashes of its files, for every
# platform and Python the project supports. The README's commands, CI and scripts/wheel_check.sh install from them
# with `pip install --require-hashes`, so no resolver ever picks a release nobody reviewed (LiteLLM 1.82.7 and
# 1.82.8 carried a credential stealer). Run this only to upgrade on purpose, and review the diff like code:
#
#   bash scripts/lock.sh                  # the versions installed in .venv stay as they are (what the tests ran on)
#   bash scripts/lock.sh --upgrade        # the newest releases pyproject.toml's ranges allow
#   LOCK_VENV=path/to/venv bash scripts/lock.sh   # keep the versions of another environment
#
# uv does the resolving (`uv pip compile --universal`); it is installed from PyPI in a throwaway environment.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$repo"

python3 -m venv "$work/uv"
"$work/uv/bin/pip" install -q uv
printf 'setuptools>=77\n' > "$work/build.in"  # [build-system] requires: editable installs run without build isolation
venv="${LOCK_VENV:-.venv}"
constraints=()
if [[ "${1:-}" != "--upgrade" && -x "$venv/bin/pip" ]]; then
  "$venv/bin/pip" freeze --exclude-editable | grep -v '^orchestrator-runtime' > "$work/installed.txt"
  constraints=(-c "$work/installed.txt")
fi
compile() {  # compile OUTPUT INPUT... [uv options]
  local out="$1"
  shift
  "$work/uv/bin/uv" pip compile "$@" "${constraints[@]}" --universal --python-version 3.11 --generate-hashes \
    --quiet --custom-compile-command "bash scripts/lock.sh" -o "$out"
  sed -i "s#$work/##g" "$out"  # no temporary paths in the file
}
# The whole test environment first; every other file keeps its versions, so all four agree.
compile requirements/test.txt pyproject.toml "$work/build.in" --extra test
constraints=(-c requirements/test.txt)
compile requirements/base.txt pyproject.toml "$work/build.in"
compile requirements/server.txt pyproject.toml --extra server
printf 'pytest\npytest-asyncio\n' > "$work/init-tests.in"  # what the tests of an `orchestrator init` project need
compile requirements/init-tests.txt "$work/init-tests.in"
echo "wrote requirements/{test,base,server,init-tests}.txt: review the diff"
