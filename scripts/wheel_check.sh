#!/usr/bin/env bash
# Build the wheel, install it (not editable) in a fresh virtual environment, and use it as a stranger would:
# the version, the demo in an empty folder on the base install (no extras), `serve` naming the extra it lacks,
# `init` followed by the new project's own checks and tests, and finally the server extra importing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Every package from the lock files (requirements/, scripts/lock.sh), hashes checked: no resolver picks a release.
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --require-hashes -r "$repo/requirements/base.txt"  # the base install: no extras
"$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$work/dist" "$repo"  # the locked setuptools
wheel="$(ls "$work"/dist/*.whl)"
"$work/venv/bin/pip" install -q --no-deps "$wheel"
export PATH="$work/venv/bin:$PATH"
unset OPENAI_API_KEY ANTHROPIC_API_KEY GEMINI_API_KEY || true

echo "== orchestrator --version"
orchestrator --version
echo "== the base install has none of the extras' packages"
python - <<'EOF'
import importlib.util

extras = ("fastapi", "uvicorn", "websockets", "asyncpg", "redis", "quickjs_rs", "temporalio", "mcp")
present = [name for name in extras if importlib.util.find_spec(name) is not None]
assert not present, f"the base install pulled in {present}"
EOF
mkdir "$work/empty" && cd "$work/empty"
echo "== orchestrator run support_demo (in an empty folder, base install)"
orchestrator run support_demo > demo.out
tail -n 3 demo.out
grep -q "end_conversation" demo.out
echo "== orchestrator serve (base install: names the server extra)"
orchestrator serve --help > serve_help.out
grep -q "orchestrator-runtime\[server\]" serve_help.out
if orchestrator serve > serve.out 2>&1; then
  echo "orchestrator serve started without the server extra" >&2
  exit 1
fi
cat serve.out
grep -q "orchestrator serve needs the server extra: pip install 'orchestrator-runtime\[server\]'" serve.out
if grep -q "Traceback" serve.out; then
  echo "orchestrator serve printed a traceback" >&2
  exit 1
fi
echo "== orchestrator init myproj, then its check, run and tests"
pip install -q --require-hashes -r "$repo/requirements/init-tests.txt"  # what a new project's tests need
orchestrator init myproj
cd myproj
orchestrator check
orchestrator run weather_chat --model test -m "hello" | tail -n 3
python -m pytest -q -p no:cacheprovider
echo "== the server extra"
pip install -q --require-hashes -r "$repo/requirements/server.txt"
python -c "import orchestrator.server.app"
echo "wheel check: passed"
