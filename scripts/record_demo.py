"""Re-record the cassette the README demo replays (cassettes/support_demo.json).

The conversation comes from a scripted model (cassettes/scripts/support_demo.json)
served through respx, so the cassette holds the exact OpenAI-format SSE bytes
the stream parser reads on replay. Run it after changing the demo agent or its tools:

    .venv/bin/python scripts/record_demo.py
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.cli.session import SessionOptions, run_session  # noqa: E402
from orchestrator.core.logs import configure_logging  # noqa: E402
from orchestrator.server.scripted import scripted_model  # noqa: E402


async def main(agent: str = "support_demo") -> None:
    os.chdir(ROOT)
    configure_logging("WARNING")
    model = scripted_model(ROOT / "cassettes" / "scripts" / f"{agent}.json")
    options = SessionOptions(agent=agent, record=f"cassettes/{agent}.json", storage=":memory:")
    with model.serving():
        result, messages = await run_session(options)
    print(
        f"\nrecorded cassettes/{agent}.json: {len(model.requests)} requests, {len(messages)} messages, "
        f"stopped by {result and result.reason}"
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
