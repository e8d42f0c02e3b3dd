"""The loader: every rule broken once, all problems collected, private module names."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.definitions.define import AgentDefinition, PromptDefinition, ToolDefinition
from orchestrator.definitions.loader import (
    Definitions,
    LoadError,
    Problem,
    UnknownNameError,
    load_definitions,
)

REPO = Path(__file__).resolve().parents[1]

TOOL = """\
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool


class Args(BaseModel):
    text: str


async def execute(state, args: Args) -> ToolResult:
    return ToolResult(status="success", result=args.text)


tool = define_tool(description="{description}", args=Args, execute=execute, uses={uses})
"""

PROMPT = """\
from orchestrator import define_prompt

prompt = define_prompt(prompt="Be helpful.", tools={tools}, tool_description="A helper")
"""

AGENT = """\
from orchestrator import Side, define_agent

agent = define_agent(
    type="dual_ai",
    side_a=Side({side_a}),
    side_b=Side({side_b}),
    expose_as_tool={exposed},
    tool_description="Runs a whole conversation",
)
"""

HOOK = """\
from orchestrator import define_hook


def fn(*args, **kwargs):
    return None


hook = define_hook("{hook}", fn)
"""


class Project:
    """A throwaway definitions folder with a valid baseline to break one rule at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for kind in ("tools", "prompts", "agents", "hooks"):
            (root / kind).mkdir(parents=True)
        self.tool("echo")
        self.tool("shout", uses=("echo",))
        self.prompt("helper", tools=("echo", "shout"))
        self.prompt("other", tools=("echo",))
        self.agent("duo", side_a='"helper", stop_tool="shout"', side_b='"other"')
        self.write("hooks/prefilter_llm_history.py", HOOK.format(hook="prefilter_llm_history"))

    def write(self, relpath: str, source: str) -> Path:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def tool(self, name: str, uses: tuple[str, ...] = ()) -> Path:
        return self.write(f"tools/{name}.py", TOOL.format(description=f"The {name} tool", uses=uses))

    def prompt(self, name: str, tools: tuple[str, ...] = ()) -> Path:
        return self.write(f"prompts/{name}.py", PROMPT.format(tools=tools))

    def agent(self, name: str, side_a: str, side_b: str, exposed: bool = False) -> Path:
        return self.write(f"agents/{name}.py", AGENT.format(side_a=side_a, side_b=side_b, exposed=exposed))

    def problems(self) -> list[Problem]:
        return load_definitions(self.root, collect=True).problems

    def only_problem(self) -> Problem:
        problems = self.problems()
        assert len(problems) == 1, "\n".join(map(str, problems))
        return problems[0]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "agents")


# --------------------------------------------------------------------------
# the valid baseline
# --------------------------------------------------------------------------


def test_valid_project_loads_with_names(project: Project) -> None:
    defs = load_definitions(project.root)
    assert defs.problems == []
    assert set(defs.tools) == {"echo", "shout"}
    assert defs.tools["echo"].name == "echo"
    assert defs.prompts["helper"].name == "helper"
    assert defs.agents["duo"].name == "duo"
    assert defs.hooks["prefilter_llm_history"].hook == "prefilter_llm_history"
    assert defs.root == project.root


def test_callable_names_include_prompts_and_exposed_agents(project: Project) -> None:
    project.agent("team", side_a='"helper"', side_b='"other"', exposed=True)
    defs = load_definitions(project.root)
    assert defs.callable_names() == ["echo", "shout", "helper", "other", "team"]  # not "duo"
    assert isinstance(defs.resolve_callable("echo"), ToolDefinition)
    assert isinstance(defs.resolve_callable("helper"), PromptDefinition)
    assert isinstance(defs.resolve_callable("team"), AgentDefinition)
    spec = defs.callable_spec("team", "openai")
    assert spec["function"]["description"] == "Runs a whole conversation"


def test_resolve_callable_unknown_suggests_close_names(project: Project) -> None:
    defs = load_definitions(project.root)
    with pytest.raises(UnknownNameError) as err:
        defs.resolve_callable("ecko")
    assert isinstance(err.value, KeyError)
    assert "did you mean 'echo'?" in str(err.value)
    with pytest.raises(KeyError):
        defs.resolve_callable("duo")  # an agent not exposed as a tool is not callable


def test_init_pycache_and_underscore_helpers_are_fine(project: Project) -> None:
    project.write("tools/__init__.py", "raise RuntimeError('never imported')\n")
    project.write("tools/__pycache__/stale.cpython-311.pyc", "")
    project.write("tools/_shared.py", "GREETING = 'hi'\n")
    project.write("tools/notes.txt", "not python")
    project.write(
        "tools/greet.py",
        TOOL.format(description="Greets", uses=()).replace(
            "from orchestrator import", "from ._shared import GREETING\nfrom orchestrator import"
        ),
    )
    defs = load_definitions(project.root)
    assert "greet" in defs.tools and "_shared" not in defs.tools


# --------------------------------------------------------------------------
# each rule broken once
# --------------------------------------------------------------------------


def test_root_missing(tmp_path: Path) -> None:
    problems = load_definitions(tmp_path / "nowhere", collect=True).problems
    assert [(p.rule, p.message) for p in problems] == [("root", "the definitions folder does not exist")]


def test_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "agents").write_text("")
    [problem] = load_definitions(tmp_path / "agents", collect=True).problems
    assert problem.rule == "root" and "is not a folder" in problem.message


def test_misspelled_kind_folder(project: Project) -> None:
    project.write("tool/echo2.py", "")
    problem = project.only_problem()
    assert problem.rule == "unknown-folder" and "did you mean 'tools'?" in problem.message


def test_kind_is_a_file(project: Project) -> None:
    for child in (project.root / "hooks").iterdir():
        child.unlink()
    (project.root / "hooks").rmdir()
    project.write("hooks", "")
    problem = project.only_problem()
    assert problem.rule == "not-a-folder" and problem.file.endswith("hooks")


def test_snake_case_file_name(project: Project) -> None:
    project.write("tools/LookUp-Order.py", TOOL.format(description="x", uses=()))
    problem = project.only_problem()
    assert problem.rule == "snake-case"
    assert problem.file.endswith("LookUp-Order.py")
    assert "look_up_order.py" in problem.message


def test_name_too_long(project: Project) -> None:
    project.tool("t" * 65)
    assert project.only_problem().rule == "name-too-long"


def test_nested_folder(project: Project) -> None:
    project.write("prompts/more/extra.py", PROMPT.format(tools=()))
    problem = project.only_problem()
    assert problem.rule == "nested-folder" and problem.file.endswith("prompts/more")


def test_import_error_shows_file_and_line(project: Project) -> None:
    path = project.write("tools/broken.py", "import os\n\nvalue = 1 / 0\n")
    problem = project.only_problem()
    assert (problem.rule, problem.file, problem.line) == ("import-error", str(path), 3)
    assert "ZeroDivisionError" in problem.message
    assert str(problem).startswith(f"{path}:3: cannot import")


def test_syntax_error_shows_file_and_line(project: Project) -> None:
    project.write("tools/broken.py", "x = 1\ndef oops(:\n    pass\n")
    problem = project.only_problem()
    assert (problem.rule, problem.line) == ("import-error", 2)
    assert "SyntaxError" in problem.message


def test_invalid_definition(project: Project) -> None:
    project.write(
        "tools/sync_tool.py",
        """\
        from orchestrator import define_tool


        def execute(state):
            return None


        tool = define_tool(description="Not async", execute=execute)
        """,
    )
    problem = project.only_problem()
    assert problem.rule == "invalid-definition" and problem.line == 8
    assert "async" in problem.message


def test_unsupported_argument_type_names_the_field(project: Project) -> None:
    project.write(
        "tools/dated.py",
        """\
        from datetime import datetime
        from pydantic import BaseModel
        from orchestrator import define_tool


        class Window(BaseModel):
            since: datetime


        class Args(BaseModel):
            window: Window


        async def execute(state, args):
            return None


        tool = define_tool(description="Dated", args=Args, execute=execute)
        """,
    )
    problem = project.only_problem()
    assert problem.rule == "unsupported-argument-type"
    assert "Args.window.since" in problem.message and problem.line == 18  # the define_tool line


def test_missing_definition(project: Project) -> None:
    project.write("prompts/loose.py", PROMPT.format(tools=()).replace("prompt = ", "my_prompt = "))
    problem = project.only_problem()
    assert problem.rule == "missing-definition" and "'prompt'" in problem.message


def test_wrong_kind(project: Project) -> None:
    project.write("tools/confused.py", PROMPT.format(tools=()).replace("prompt = ", "tool = "))
    problem = project.only_problem()
    assert problem.rule == "wrong-kind"
    assert "must be a ToolDefinition" in problem.message and "PromptDefinition" in problem.message


def test_one_definition_per_file(project: Project) -> None:
    second = "\nsecond = define_tool(description='b', execute=execute, args=Args)\n"
    source = TOOL.format(description="Two", uses=()) + second
    project.write("tools/two.py", source)
    problem = project.only_problem()
    assert problem.rule == "one-per-file" and "'second'" in problem.message


def test_hook_file_named_after_its_hook(project: Project) -> None:
    project.write("hooks/my_filter.py", HOOK.format(hook="before_create_message"))
    problem = project.only_problem()
    assert problem.rule == "hook-name"
    assert "hooks/before_create_message.py" in problem.message


def test_duplicate_name_across_tools_and_prompts(project: Project) -> None:
    project.prompt("echo")
    problem = project.only_problem()
    assert problem.rule == "duplicate-name"
    assert problem.file.endswith("prompts/echo.py") and "tools/echo.py" in problem.message


def test_duplicate_name_with_exposed_agent(project: Project) -> None:
    project.agent("helper", side_a='"helper"', side_b='"other"', exposed=True)
    problem = project.only_problem()
    assert problem.rule == "duplicate-name" and problem.file.endswith("agents/helper.py")


def test_unexposed_agent_may_share_a_prompt_name(project: Project) -> None:
    project.agent("helper", side_a='"helper"', side_b='"other"')
    assert project.problems() == []


def test_unknown_tool_in_prompt(project: Project) -> None:
    project.prompt("helper", tools=("shout", "shuot"))
    problem = project.only_problem()
    assert problem.rule == "unknown-reference" and problem.line == 3
    assert "prompt 'helper' lists tool 'shuot'" in problem.message
    assert "did you mean 'shout'?" in problem.message


def test_unknown_tool_in_uses(project: Project) -> None:
    project.tool("shout", uses=("echoo",))
    problem = project.only_problem()
    assert "tool 'shout' uses 'echoo'" in problem.message and "did you mean 'echo'?" in problem.message


def test_unknown_side_prompt(project: Project) -> None:
    project.agent("duo", side_a='"helpr"', side_b='"other"')
    problem = project.only_problem()
    assert problem.rule == "unknown-reference"
    assert "side_a uses prompt 'helpr', which does not exist" in problem.message
    assert "did you mean 'helper'" in problem.message


def test_unknown_stop_and_end_tools(project: Project) -> None:
    project.agent("duo", side_a='"helper", stop_tool="shoot"', side_b='"other", end_conversation_tool="quit"')
    problems = project.problems()
    assert [p.rule for p in problems] == ["unknown-reference", "unknown-reference"]
    assert "side_a stop_tool 'shoot'" in problems[0].message and "'shout'" in problems[0].message
    assert "side_b end_conversation_tool 'quit'" in problems[1].message


def test_stop_tool_must_be_offered_by_the_side_prompt(project: Project) -> None:
    project.agent("duo", side_a='"helper"', side_b='"other", end_conversation_tool="shout"')
    problem = project.only_problem()
    assert problem.rule == "tool-not-offered" and "'other'" in problem.message


def test_references_to_a_broken_file_are_not_reported_twice(project: Project) -> None:
    project.write("tools/echo.py", "raise ValueError('boom')\n")
    problem = project.only_problem()
    assert problem.rule == "import-error"


# --------------------------------------------------------------------------
# all problems at once
# --------------------------------------------------------------------------


def test_load_error_lists_every_problem(project: Project) -> None:
    project.write("tools/BadName.py", "")
    project.write("tools/broken.py", "1/0\n")
    project.prompt("helper", tools=("shout", "nope"))
    with pytest.raises(LoadError) as err:
        load_definitions(project.root)
    rules = [p.rule for p in err.value.problems]
    assert rules == ["snake-case", "import-error", "unknown-reference"]
    lines = str(err.value).splitlines()
    assert lines[0] == "3 problems in the definitions:"
    assert len(lines) == 4 and all(str(p) in lines for p in err.value.problems)


def test_collect_returns_what_loaded_beside_the_problems(project: Project) -> None:
    project.write("tools/broken.py", "1/0\n")
    defs = load_definitions(project.root, collect=True)
    assert isinstance(defs, Definitions)
    assert len(defs.problems) == 1 and set(defs.tools) == {"echo", "shout"}


# --------------------------------------------------------------------------
# module names
# --------------------------------------------------------------------------


def test_two_projects_do_not_collide(tmp_path: Path) -> None:
    first, second = Project(tmp_path / "one"), Project(tmp_path / "two")
    second.write("tools/echo.py", TOOL.format(description="The second echo", uses=()))
    a, b = load_definitions(first.root), load_definitions(second.root)
    assert a.tools["echo"].description == "The echo tool"
    assert b.tools["echo"].description == "The second echo"
    modules = [m for m in sys.modules if m.endswith(".tools.echo")]
    assert len(modules) >= 2 and all(m.startswith("_orchestrator_defs_") for m in modules)
    assert "tools" not in sys.modules and "tools.echo" not in sys.modules


def test_loading_again_sees_edits(project: Project) -> None:
    assert load_definitions(project.root).tools["echo"].description == "The echo tool"
    project.write("tools/echo.py", TOOL.format(description="Edited echo tool!", uses=()))
    assert load_definitions(project.root).tools["echo"].description == "Edited echo tool!"


def test_shipped_examples_load_cleanly() -> None:
    defs = load_definitions(REPO / "agents")
    assert defs.problems == []
    assert {
        "lookup_order",
        "get_current_time",
        "lookup_customer",
        "get_weather",
        "process_order",
        "update_context",
        "send_notification",
        "end_chat",
    } <= set(defs.tools)
    assert {"support_agent", "customer"} <= set(defs.prompts)
    assert {"support_demo", "support_chat"} <= set(defs.agents)


# --------------------------------------------------------------------------
# every problem of a file, and pydantic's refusals in our words
# --------------------------------------------------------------------------


def test_every_problem_of_one_definition_is_listed(project: Project) -> None:
    """`check` used to show one problem per file, the next only once the first was fixed."""
    project.write(
        "tools/many.py",
        """\
        from orchestrator import define_tool


        def execute(state):
            return None


        tool = define_tool(description="", execute=execute, progress_argument="city", timeout="soon")
        """,
    )
    problems = project.problems()
    assert [(p.rule, p.line) for p in problems] == [("invalid-definition", 8)] * 4, problems
    messages = "\n".join(p.message for p in problems)
    for fragment in (
        "'description' must be a non-empty string",
        "'execute' must be an async function",
        "progress_argument 'city'",
        "'timeout': Input should be a valid number",
    ):
        assert fragment in messages


def test_a_prompt_and_an_agent_report_every_problem_too(project: Project) -> None:
    project.write(
        "prompts/broken.py",
        """\
        from orchestrator import define_prompt

        prompt = define_prompt(prompt="Hi.", tool_description="", tools="echo", max_steps=0)
        """,
    )
    project.write(
        "agents/broken_agent.py",
        """\
        from orchestrator import Side, define_agent

        agent = define_agent(type="dual_ai", side_a=Side("helper"), expose_as_tool=True, max_session_turns=0)
        """,
    )
    by_file: dict[str, list[str]] = {}
    for problem in project.problems():
        by_file.setdefault(Path(problem.file).stem, []).append(problem.message)
    assert len(by_file["broken"]) == 3 and "'max_steps': Input should be greater than or equal to 1, got 0" in (
        "\n".join(by_file["broken"])
    )
    agent = "\n".join(by_file["broken_agent"])
    assert len(by_file["broken_agent"]) == 3, agent
    assert "needs 'side_b'" in agent and "requires 'tool_description'" in agent and "'max_session_turns'" in agent


def test_a_pydantic_refusal_in_the_file_reads_as_a_definition_problem(project: Project) -> None:
    project.write(
        "agents/solo.py",
        """\
        from orchestrator import Side, define_agent

        agent = define_agent(type="ai_human", side_a=Side("helper", max_steps=0))
        """,
    )
    problem = project.only_problem()
    assert problem.rule == "invalid-definition" and problem.line == 3
    assert problem.message == "Side: max_steps: Input should be greater than or equal to 1, got 0"


_ARBITRARY = """\
from pydantic import BaseModel
from orchestrator import ThreadState, ToolResult, define_tool


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


{body}
"""


def test_an_arbitrary_class_as_an_argument_is_named_without_pydantic_internals(project: Project) -> None:
    """Before: `cannot import: PydanticSchemaGenerationError: ... Set arbitrary_types_allowed=True ...`."""
    project.write(
        "tools/plot.py",
        _ARBITRARY.format(
            body=textwrap.dedent(
                """\
                class Args(BaseModel):
                    label: str
                    at: Point | None = None


                async def execute(state: ThreadState, args: Args) -> ToolResult:
                    return ToolResult(status="success")


                tool = define_tool(description="Plot", args=Args, execute=execute)
                """
            )
        ),
    )
    project.write(
        "tools/mark.py",
        _ARBITRARY.format(
            body=textwrap.dedent(
                """\
                @define_tool
                async def mark(state: ThreadState, label: str, at: list[Point]) -> ToolResult:
                    \"\"\"Mark a point.\"\"\"
                    return ToolResult(status="success")
                """
            )
        ),
    )
    problems = {Path(p.file).stem: p for p in project.problems()}
    assert set(problems) == {"plot", "mark"}
    plot, mark = problems["plot"], problems["mark"]
    assert plot.rule == mark.rule == "unsupported-argument-type"
    assert plot.line == 10 and plot.message.startswith("Args.at: Point is not a supported type: models send JSON")
    assert mark.message.startswith("define_tool(mark): parameter 'at': Point is not a supported type")
    for problem in (plot, mark):
        assert "arbitrary_types_allowed" not in problem.message and "pydantic" not in problem.message.lower()
        assert "_orchestrator_defs_" not in problem.message


def test_loading_while_another_thread_imports(project: Project) -> None:
    """`orchestrator run` imports LiteLLM in a thread beside loading; iterating sys.modules raced with it
    (`RuntimeError: dictionary changed size during iteration`, seen once in ~10 runs)."""
    import threading
    import types

    stop = threading.Event()
    module = types.ModuleType("race")
    added: list[str] = []

    def importing() -> None:  # every step changes sys.modules' size, as an import does
        while not stop.is_set() and len(added) < 100_000:
            name = f"_race_module_{len(added)}"
            sys.modules[name] = module
            added.append(name)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    worker = threading.Thread(target=importing, daemon=True)
    worker.start()
    try:
        for _ in range(100):
            load_definitions(project.root)
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(switch)
        for name in added:
            sys.modules.pop(name, None)


# --------------------------------------------------------------------------
# {placeholders} in prompts
# --------------------------------------------------------------------------

_PLACEHOLDER_PROMPT = """\
from orchestrator import define_prompt

prompt = define_prompt(
    prompt=(
        "You help {customer_name} with order {order_id}.\\n"
        LINE
    ),
    variables={"customer_name": "a customer"},
    tool_description="Support",
)
"""


def test_a_misspelled_placeholder_names_file_line_and_a_close_name(project: Project) -> None:
    """Before: `check` said no problems and the model received `{customer_nmae}` as written."""
    file = project.write("prompts/support.py", _PLACEHOLDER_PROMPT.replace("LINE", '"Greet {customer_nmae} by name."'))
    project.write(
        "agents/chat.py",
        """\
        from pydantic import BaseModel
        from orchestrator import Side, define_agent


        class Args(BaseModel):
            order_id: str


        agent = define_agent(type="ai_human", side_a=Side("support"), args=Args)
        """,
    )
    problem = project.only_problem()
    assert (problem.file, problem.line, problem.rule) == (str(file), 6, "unknown-placeholder")
    assert "placeholder {customer_nmae}" in problem.message and "did you mean 'customer_name'?" in problem.message
    assert "{{customer_nmae}}" in problem.message  # how to write the braces as text
    with pytest.raises(LoadError, match="customer_nmae"):
        load_definitions(project.root)  # so `orchestrator run` and Runtime.from_path refuse it too


def test_placeholders_filled_by_variables_prompt_args_and_agent_args(project: Project) -> None:
    """`{order_id}` comes from the agent's arguments, `{customer_name}` from variables, `{topic}` from the
    arguments of a prompt called as a tool, `{region}` from the arguments of an agent whose side calls it."""
    project.write("prompts/support.py", _PLACEHOLDER_PROMPT.replace("LINE", '"Ask research about {{braces}}."'))
    project.write(
        "prompts/research.py",
        """\
        from pydantic import BaseModel
        from orchestrator import define_prompt


        class Args(BaseModel):
            topic: str


        prompt = define_prompt(prompt="Research {topic} in {region}. JSON: {{\\"a\\": 1}}", tool_description="R",
                               args=Args)
        """,
    )
    project.write(
        "prompts/front.py",
        'from orchestrator import define_prompt\n\nprompt = define_prompt(prompt="Front.", tools=("research",), '
        'tool_description="F")\n',
    )
    project.write(
        "agents/chat.py",
        """\
        from pydantic import BaseModel
        from orchestrator import Side, define_agent


        class Args(BaseModel):
            order_id: str
            region: str = "EU"


        agent = define_agent(type="ai_human", side_a=Side("support"), args=Args)
        """,
    )
    project.write(
        "agents/desk.py",
        """\
        from pydantic import BaseModel
        from orchestrator import Side, define_agent


        class Args(BaseModel):
            region: str


        agent = define_agent(type="ai_human", side_a=Side("front"), args=Args)
        """,
    )
    problems = project.problems()
    assert [p for p in problems if "placeholder" in p.rule] == [], problems


def test_a_placeholder_only_another_agent_fills_is_reported(project: Project) -> None:
    """The arguments that count are those of the agents whose threads render the prompt."""
    project.write("prompts/support.py", _PLACEHOLDER_PROMPT.replace("LINE", '"Region: {region}."'))
    project.write(
        "agents/chat.py",
        "from orchestrator import Side, define_agent\n\n"
        'agent = define_agent(type="ai_human", side_a=Side("support"))\n',
    )
    project.write(
        "agents/desk.py",
        """\
        from pydantic import BaseModel
        from orchestrator import Side, define_agent


        class Args(BaseModel):
            order_id: str
            region: str


        agent = define_agent(type="ai_human", side_a=Side("helper"), args=Args)
        """,
    )
    problems = project.problems()
    assert [(p.rule, p.line) for p in problems] == [("unknown-placeholder", 5), ("unknown-placeholder", 6)]
    assert "{order_id}" in problems[0].message and "{region}" in problems[1].message
    assert "(known: customer_name, message)" in problems[1].message  # nothing close: what is known


def test_braces_that_keep_every_placeholder_unfilled_are_reported(project: Project) -> None:
    """A JSON example beside a placeholder: the renderer cannot read the braces, so it sends the prompt as
    written and `{customer_name}` reaches the model."""
    project.write("prompts/support.py", _PLACEHOLDER_PROMPT.replace("LINE", '"Answer as JSON: {\\"ok\\": true}"'))
    problem = project.only_problem()
    assert problem.rule == "unreadable-placeholders" and problem.line == 5
    assert "{customer_name}, {order_id} stay unfilled" in problem.message and "{{ or }}" in problem.message


@pytest.mark.parametrize(
    "template",
    [
        "Hello {name}",
        "Hi {{name}} and {other!r} and {third:>8}",
        'JSON {"a": 1} only',
        'JSON {"a": 1} and {name}',
        "a lone } and {name}",
        "{} and {name}",
        "{name.upper}",
        "{name[0]}",
        "no braces",
    ],
)
def test_the_check_reads_a_prompt_as_the_renderer_fills_it(template: str) -> None:
    from orchestrator.definitions.placeholders import read_placeholders
    from orchestrator.engine.views import render_prompt

    found = read_placeholders(template)
    rendered = render_prompt(template, dict.fromkeys(found.names, "VALUE"))
    if found.unreadable is None:
        assert not any("{" + n in rendered for n in found.names if "{{" + n not in template), rendered
    else:
        assert rendered == template  # sent as written: nothing filled
