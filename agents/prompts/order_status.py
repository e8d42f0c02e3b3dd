"""A typed answer: the order's status as an `OrderStatus`, validated (docs/guide.md, "Typed answers")."""

from typing import Literal

from pydantic import BaseModel, Field

from orchestrator import define_prompt


class OrderStatus(BaseModel):
    """What the caller's code gets back: `result.output` is one of these."""

    order_id: str = Field(description="The order's ID, as the lookup gave it")
    status: Literal["processing", "shipped", "delivered", "cancelled", "unknown"]
    items: list[str] = Field(description="The items of the order")
    note: str | None = Field(default=None, description="Anything the customer should know, in one sentence")


prompt = define_prompt(
    prompt=(
        "You report an order's status. Look the order up with your tool, then answer with the "
        "order's ID, its status, its items and, if useful, a one-sentence note."
    ),
    tools=("lookup_order",),
    output=OrderStatus,
    tool_description="The status of one order, as a structured value",
)
