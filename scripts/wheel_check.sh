#!/usr/bin/env bash
# Build the wheel and use it as a stranger would, in an empty folder holding only the wheel: README.md's
# "As a package" block as written (a fresh venv, the wheel, the demo, `init`, the project's own test
# dependencies, its run and tests), then with that venv: the version, the base install without the extras'
# packages, `serve` naming the extra it lacks, `run | head -1` ending quietly, and with the server extra,
# `serve --scripted demo` answering a conversation from the script the wheel carries.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT

# Every install below, the README block's included, takes the versions the lock files name (requirements/,
# scripts/lock.sh): as constraints, so the block runs as a user types it and still no resolver picks a release
# nobody reviewed. (The README's two commands install from the same files with their hashes.)
sed -n 's/^\([A-Za-z0-9_.-]*\)\(\[[^]]*\]\)\{0,1\}==\([^ ;\\]*\).*/\1==\3/p' "$repo"/requirements/*.txt | sort -u > "$work/constraints.txt"
export PIP_CONSTRAINT="$work/constraints.txt"
python3 -m pip wheel -q --no-deps -w "$work/dist" "$repo"
wheel="$(ls "$work"/dist/*.whl)"
unset OPENAI_API_KEY ANTHROPIC_API_KEY GEMINI_API_KEY VIRTUAL_ENV || true
mkdir "$work/empty" && cp "$wheel" "$work/empty/"

echo "== README.md's \"As a package\" block, verbatim, in an empty folder holding the wheel"
python3 - "$repo/README.md" > "$work/as_a_package.sh" <<'EOF'
import re, sys

text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("\n## As a package\n", 1)[1]
block = re.search(r"^```bash\n(.*?)^```", section, re.S | re.M)
assert block, "README.md: no ```bash block under '## As a package'"
print(block.group(1), end="")
EOF
cat "$work/as_a_package.sh"
(cd "$work/empty" && PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euo pipefail "$work/as_a_package.sh")
export PATH="$work/empty/.venv/bin:$PATH"
project="$work/empty/myproj"

echo "== orchestrator --version"
orchestrator --version
echo "== the base install has none of the extras' packages"
python - <<'EOF'
import importlib.util

extras = ("fastapi", "uvicorn", "websockets", "asyncpg", "redis", "quickjs_rs", "temporalio", "mcp")
present = [name for name in extras if importlib.util.find_spec(name) is not None]
assert not present, f"the base install pulled in {present}"
EOF
mkdir "$work/empty2" && cd "$work/empty2"
echo "== orchestrator run support_demo (in an empty folder, base install)"
orchestrator run support_demo > demo.out
tail -n 3 demo.out
grep -q "end_conversation" demo.out
echo "== orchestrator run support_demo | head -1 (the closed pipe ends it quietly, status 141 as SIGPIPE)"
set +e
orchestrator run support_demo 2> pipe.err | head -1
status="${PIPESTATUS[0]}"
set -e
if [ "$status" != 141 ] || grep -qv '^(' pipe.err; then  # only the "(offline: ...)" notes may be there
  echo "run | head -1: status $status (expected 141), stderr:" >&2
  cat pipe.err >&2
  exit 1
fi
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
echo "== the new project checks clean"
(cd "$project" && orchestrator check)
echo "== the server extra, and serve --scripted demo on the bundled examples"
pip install -q "$wheel[server]"
python -c "import orchestrator.server.app"
bundled="$(python -c 'from orchestrator.cli.scaffold import bundled_project; print(bundled_project())')"
port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
orchestrator serve --scripted demo --path "$bundled/agents" --config "$bundled/configs/default.yaml" \
  --db "$work/serve.db" --port "$port" --log-level warning > serve_demo.out 2>&1 &
server_pid=$!
python - "$port" <<'EOF'
import json, sys, time, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


for _ in range(100):
    try:
        call("GET", "/agents")
        break
    except OSError:
        time.sleep(0.2)
thread = call("POST", "/threads", {"agent": "support_demo"})
result = call("POST", f"/threads/{thread['id']}/run?wait=true")
assert result["reason"] == "end_conversation", result
print("serve --scripted demo: support_demo ended by", result["reason"])
EOF
kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
server_pid=""
echo "wheel check: passed"
