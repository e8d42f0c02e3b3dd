"""The retail agent: tau2-bench's retail policy (../../policy.md, MIT, NOTICE.md) as its system prompt."""

from pathlib import Path

from orchestrator import define_prompt

POLICY = (Path(__file__).resolve().parents[2] / "policy.md").read_text(encoding="utf-8")

prompt = define_prompt(
    prompt=POLICY,
    model=None,  # the config's default model; the suite sets its own
    tools=(
        "find_user_id_by_email",
        "find_user_id_by_name_zip",
        "get_user_details",
        "get_order_details",
        "cancel_pending_order",
    ),
    tool_description="Help a retail customer under the store's policy",
)
