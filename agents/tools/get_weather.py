"""Current weather for a city from an HTTP weather API.

The base URL comes from `WEATHER_API_BASE` (text) and the key from
`WEATHER_API_KEY`, declared a secret: it is sent to the API and nowhere else.
Both are operator-only (`scope="operator"`): a thread, its tools and a person
over HTTP can set neither, so only the operator decides where the key goes.
Error messages are built from status codes and exception types, and anything
echoing the request is scrubbed, so the key never reaches the model, the
history or the logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, quote_plus

import httpx
from pydantic import BaseModel, Field

from orchestrator import ToolResult, VariableDefinition, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState

TIMEOUT_SECONDS = 10.0


class Args(BaseModel):
    city: str = Field(description="City name, e.g. Lisbon")
    units: Literal["metric", "imperial"] = Field(default="metric", description="Unit system")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    base = await _env(state, "WEATHER_API_BASE")
    key = await _env(state, "WEATHER_API_KEY")
    if not base or not key:
        missing = "WEATHER_API_BASE" if not base else "WEATHER_API_KEY"
        return ToolResult(status="error", error=f"Weather is not configured: {missing} is not set")
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as client:
            response = await client.get(
                f"{base.rstrip('/')}/current", params={"city": args.city, "units": args.units, "key": key}
            )
        if response.status_code != 200:
            return ToolResult(status="error", error=f"Weather API error: HTTP {response.status_code}")
        data = response.json()
        temperature, conditions = data["temperature"], data["conditions"]
    except httpx.HTTPError as exc:
        detail = _scrub(str(exc), key)
        return ToolResult(status="error", error=f"Failed to fetch weather: {type(exc).__name__}: {detail}")
    except (ValueError, KeyError, TypeError):
        return ToolResult(status="error", error="Weather API sent an unexpected response")
    degrees = "°C" if args.units == "metric" else "°F"
    return ToolResult(status="success", result=f"Weather in {args.city}: {temperature}{degrees}, {conditions}")


async def _env(state: ThreadState, name: str) -> str | None:
    try:
        return await state.env(name)
    except Exception:  # unset everywhere: the runtime raises rather than return ""
        return None


def _scrub(text: str, secret: str) -> str:
    for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
        text = text.replace(form, "[redacted]")
    return text


tool = define_tool(
    description="Fetch the current weather (temperature and conditions) for a city",
    args=Args,
    execute=execute,
    variables=(
        VariableDefinition(
            name="WEATHER_API_BASE", type="text", scope="operator", description="Base URL of the weather API"
        ),
        VariableDefinition(
            name="WEATHER_API_KEY", type="secret", scope="operator", description="API key for the weather API"
        ),
    ),
    progress_argument="city",
)
