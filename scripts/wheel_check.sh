#!/usr/bin/env bash
# Build the wheel, install it (not editable) in a fresh virtual environment, and use it as a stranger would:
# the version, the demo in an empty folder, and `init` followed by the new project's own checks and tests.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m pip wheel -q --no-deps -w "$work/dist" "$repo"
wheel="$(ls "$work"/dist/*.whl)"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel" pytest pytest-asyncio  # what a new project's tests need
export PATH="$work/venv/bin:$PATH"
unset OPENAI_API_KEY ANTHROPIC_API_KEY GEMINI_API_KEY || true

echo "== orchestrator --version"
orchestrator --version
mkdir "$work/empty" && cd "$work/empty"
echo "== orchestrator run support_demo (in an empty folder)"
orchestrator run support_demo > demo.out
tail -n 3 demo.out
grep -q "end_conversation" demo.out
echo "== orchestrator init myproj, then its check, run and tests"
orchestrator init myproj
cd myproj
orchestrator check
orchestrator run weather_chat --model test -m "hello" | tail -n 3
python -m pytest -q -p no:cacheprovider
echo "wheel check: passed"
