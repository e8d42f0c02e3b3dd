"""The frameworks users would pick instead, each written the way its docs show.

- OpenAI Agents SDK on LiteLLM (`LitellmModel`) and on its native OpenAI
  Chat Completions model (`OpenAIChatCompletionsModel`): `Runner.run_streamed`,
  every stream event consumed. Tracing is off (it would export to OpenAI).
- PydanticAI on `OpenAIChatModel`: `agent.run` with an event stream handler,
  so every request streams.

A dual_ai conversation (scenario c) is two agents in a loop: each side keeps its
own history and receives the other's answer as a user message.
"""

from __future__ import annotations

import os
from typing import Any

from .common import DUAL_TURNS_PER_SIDE, OPENER, SCENARIO_TOOLS, SYSTEM, TOOLS, USER


class AgentsSDK:
    def __init__(self, base_url: str, *, litellm: bool) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        from agents import function_tool, set_tracing_disabled

        set_tracing_disabled(True)
        self.name = "Agents SDK + LiteLLM" if litellm else "Agents SDK native"
        self._litellm = litellm
        self._base = f"{base_url}/v1"
        self._tools = {name: function_tool(fn) for name, fn in TOOLS.items()}
        self._client: Any = None
        self._agents: dict[tuple[str, str], Any] = {}
        if not litellm:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(base_url=self._base, api_key="bench", max_retries=0)

    def _agent(self, scenario: str, model: str) -> Any:
        key = (scenario, model)
        if key not in self._agents:
            from agents import Agent, OpenAIChatCompletionsModel

            if self._litellm:
                from agents.extensions.models.litellm_model import LitellmModel

                backend: Any = LitellmModel(model=f"openai/{model}", base_url=self._base, api_key="bench")
            else:
                backend = OpenAIChatCompletionsModel(model=model, openai_client=self._client)
            tools = [self._tools[name] for name in SCENARIO_TOOLS[scenario]]
            self._agents[key] = Agent(name="bench", instructions=SYSTEM, tools=tools, model=backend)
        return self._agents[key]

    async def _run(self, agent: Any, items: list[Any] | str) -> tuple[Any, int]:
        from agents import Runner

        result = Runner.run_streamed(agent, input=items)
        async for _ in result.stream_events():
            pass
        return result, len(result.raw_responses)

    async def conversation(self, scenario: str, model: str) -> int:
        agent = self._agent(scenario, model)
        if scenario != "c":
            _, steps = await self._run(agent, USER)
            return steps
        histories: list[list[Any]] = [[{"role": "user", "content": OPENER}], []]
        steps = 0
        for turn in range(2 * DUAL_TURNS_PER_SIDE):
            result, n = await self._run(agent, histories[turn % 2])
            steps += n
            histories[turn % 2] = result.to_input_list()
            histories[(turn + 1) % 2].append({"role": "user", "content": result.final_output})
        return steps

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


class PydanticAI:
    name = "PydanticAI"

    def __init__(self, base_url: str) -> None:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        self._provider = OpenAIProvider(base_url=f"{base_url}/v1", api_key="bench")
        self._model_cls = OpenAIChatModel
        self._agents: dict[tuple[str, str], Any] = {}

    def _agent(self, scenario: str, model: str) -> Any:
        key = (scenario, model)
        if key not in self._agents:
            from pydantic_ai import Agent

            tools = [TOOLS[name] for name in SCENARIO_TOOLS[scenario]]
            self._agents[key] = Agent(self._model_cls(model, provider=self._provider), instructions=SYSTEM, tools=tools)
        return self._agents[key]

    async def _run(self, agent: Any, prompt: str, history: list[Any] | None) -> tuple[Any, int]:
        async def consume(_ctx: Any, events: Any) -> None:
            async for _ in events:
                pass

        result = await agent.run(prompt, message_history=history, event_stream_handler=consume)
        usage = result.usage
        return result, (usage() if callable(usage) else usage).requests

    async def conversation(self, scenario: str, model: str) -> int:
        agent = self._agent(scenario, model)
        if scenario != "c":
            _, steps = await self._run(agent, USER, None)
            return steps
        histories: list[list[Any] | None] = [None, None]
        prompt, steps = OPENER, 0
        for turn in range(2 * DUAL_TURNS_PER_SIDE):
            result, n = await self._run(agent, prompt, histories[turn % 2])
            steps += n
            histories[turn % 2] = result.all_messages()
            prompt = result.output
        return steps

    async def close(self) -> None:
        pass
