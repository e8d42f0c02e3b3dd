"""Save a customer's device settings (APN, MMS...) as the device names them.

An example of two things: a tool written as a plain function (`@define_tool`
reads the signature and docstring), and a free-form argument: the settings
are any JSON object, kept exactly as the model sent it. OpenAI receives this
tool without strict mode (`orchestrator check` notes it); the others stay strict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState


@define_tool
async def update_device_settings(
    state: ThreadState,
    customer_id: Annotated[str, Field(pattern=r"^C\d{3}$")],
    settings: dict[str, Any],
    mode: Literal["merge", "replace"] = "merge",
) -> ToolResult:
    """Save settings for a customer's device, e.g. its APN.

    Args:
        state: The thread (recognised by its annotation; not an argument).
        customer_id: Customer ID, e.g. C001.
        settings: The settings as the device names them, e.g. {"apn": "internet", "mms_proxy": ""}.
        mode: Merge into the saved settings, or replace them.
    """
    key = f"device_settings:{customer_id}"
    saved = {} if mode == "replace" else dict(await state.get_value(key) or {})
    await state.set_value(key, {**saved, **settings})
    return ToolResult(status="success", result=f"Saved {len(settings)} setting(s) for {customer_id}")
