"""Find a user id by first name, last name and zip code (tau2-bench retail)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

from ._retail import database

if TYPE_CHECKING:
    from orchestrator import ThreadState


class Args(BaseModel):
    first_name: str = Field(description="The first name of the customer, such as 'John'.")
    last_name: str = Field(description="The last name of the customer, such as 'Doe'.")
    zip: str = Field(description="The zip code of the customer, such as '12345'.")


async def execute(state: ThreadState, args: Args) -> ToolResult:
    for user_id, user in database()["users"].items():
        name = user["name"]
        if (
            name["first_name"].lower() == args.first_name.lower()
            and name["last_name"].lower() == args.last_name.lower()
            and user["address"]["zip"] == args.zip
        ):
            return ToolResult(status="success", result=user_id)
    return ToolResult(status="error", error="User not found")


tool = define_tool(
    description="Find user id by first name, last name, and zip code. Only call this function if the user "
    "cannot be found by email or cannot remember their email.",
    args=Args,
    execute=execute,
)
