"""The `orchestrator` command.

A click group, `main`; each command is a small function that imports what it
needs when it runs, so `orchestrator --help` stays fast (no LiteLLM, no
server). New commands join with `@main.command()`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from orchestrator.definitions.loader import Definitions

from orchestrator import __version__

DEFAULT_PATH = "agents"
DEFAULT_CONFIG = "configs/default.yaml"
_DIALECTS = ("openai", "anthropic", "gemini")  # = schema.DIALECTS, spelled here to keep --help light


class _Main(click.Group):
    """The command group; a closed output (`orchestrator run ... | head -1`) ends any command quietly."""

    def invoke(self, ctx: click.Context) -> Any:
        from orchestrator.cli.errors import OutputClosed, exit_output_closed

        try:
            return super().invoke(ctx)
        except (OutputClosed, BrokenPipeError):  # a run stopped its execution and closed the runtime first
            exit_output_closed()


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, message="%(prog)s %(version)s")
def main() -> None:
    """Run and inspect two-sided LLM agents defined in an agents/ folder."""


@main.command()
@click.argument("path", default=DEFAULT_PATH, type=click.Path(path_type=Path))
@click.option(
    "--config",
    "configs",
    multiple=True,
    help="Also check the config YAML (repeat to merge): its problems, that every prompt's model alias "
    "exists and its provider tools fit the model's provider; its MCP servers are started and "
    "their tools listed.",
)
def check(path: Path, configs: tuple[str, ...]) -> None:
    """Check a definitions folder and print every problem found.

    Exits with status 1 if there is any. Schemas a provider cannot take are
    printed as warnings (they matter only when that provider is used), tools
    sent to OpenAI without strict mode as notes saying which field and why.
    """
    from orchestrator.definitions.loader import load_definitions

    defs = load_definitions(path, collect=True)
    problems = [str(p) for p in defs.problems]
    if configs:
        problems += _config_problems(defs, configs)
        problems += _mcp_check(defs, configs)
    for problem in problems:
        click.echo(problem)
    for warning in _dialect_warnings(defs):
        click.echo(warning)
    if problems:
        count = len(problems)
        click.echo(f"{count} problem{'s' if count != 1 else ''} found in {', '.join([str(path), *configs])}", err=True)
        raise SystemExit(1)
    checked = f"; {', '.join(configs)}: valid, every prompt's model exists" if configs else ""
    click.echo(f"{path}: {_summary(defs)}; no problems{checked}")


def _config_problems(defs: Definitions, configs: tuple[str, ...]) -> list[str]:
    from orchestrator.core import settings  # noqa: F401 - registers the `runtime:` section's checks
    from orchestrator.model_checks import model_problems
    from providers.config import ConfigError, load_config

    try:
        config = load_config(*configs)
    except ConfigError as exc:
        return [str(exc)]
    return [str(p) for p in model_problems(defs, config)]


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of tools with their schemas.")
@click.option(
    "--path", default=DEFAULT_PATH, show_default=True, type=click.Path(path_type=Path), help="The definitions folder."
)
@click.option(
    "--dialect",
    type=click.Choice(_DIALECTS),
    default="openai",
    show_default=True,
    help="Which provider's schema dialect to print.",
)
@click.option(
    "--config", "configs", multiple=True, help="List the tools of this config's MCP servers too (starting them)."
)
def tools(as_json: bool, path: Path, dialect: str, configs: tuple[str, ...]) -> None:
    """List what models can call (tools, prompts, exposed agents, MCP tools) with their JSON schemas."""
    from orchestrator.definitions.loader import LoadError, load_definitions

    try:
        defs = load_definitions(path)
    except LoadError as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(1) from None
    entries = [_tool_entry(defs, name, dialect) for name in defs.callable_names()]
    if configs:
        entries += _mcp_entries(configs, dialect)
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    for entry in entries:
        _print_entry(entry)


def _tool_entry(defs: Definitions, name: str, dialect: str) -> dict[str, Any]:
    from orchestrator.definitions.loader import callable_description, callable_kind
    from orchestrator.definitions.schema import SchemaError, strict_notes, tool_parameters

    defn = defs.resolve_callable(name)
    try:
        parameters = tool_parameters(defn.args, dialect)
    except SchemaError as exc:
        raise click.ClickException(f"{name}: cannot be offered to {dialect}: {exc}") from None
    entry: dict[str, Any] = {
        "name": name,
        "kind": callable_kind(defn),
        "description": callable_description(defn),
        "parameters": parameters,
    }
    if dialect == "openai":
        notes = strict_notes(parameters)
        entry["strict"] = not notes
        if notes:
            entry["strict_notes"] = notes  # why this tool is sent with strict: false
    return entry


def _mcp_listings(configs: tuple[str, ...]) -> dict[str, Any]:
    """Each MCP server of the config: its allowed tools, or the error that kept it from listing them."""
    import asyncio

    from providers.config import ConfigError, load_config

    try:
        servers = load_config(*configs).mcp_servers
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if not servers:
        return {}
    from orchestrator.core.logs import ensure_logging, register_secrets
    from orchestrator.core.secrets import SecretScopes
    from orchestrator.mcp import McpServerError, McpTools

    ensure_logging()  # quiet, redacted defaults: a server's stderr is debug output
    secrets = SecretScopes()  # the credentials the servers' env and headers hold, kept out of what we print
    register_secrets(secrets)

    async def list_all() -> dict[str, Any]:
        registry = McpTools(servers, lambda text: secrets.everywhere().text(text), secrets.add)
        out: dict[str, Any] = {}
        try:
            for name in servers:
                try:
                    out[name] = await registry.listing(name)
                except McpServerError as exc:
                    out[name] = exc
        finally:
            await registry.close()
        return out

    return asyncio.run(list_all())


def _mcp_entries(configs: tuple[str, ...], dialect: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for server, listing in _mcp_listings(configs).items():
        if isinstance(listing, Exception):
            raise click.ClickException(str(listing))
        for tool in listing:
            function = tool.spec(dialect)["function"]
            entry = {
                "name": tool.exposed,
                "kind": "mcp",
                "server": server,
                "description": tool.description,
                "parameters": function["parameters"],
            }
            if dialect == "openai":
                entry["strict"] = function["strict"]
            entries.append(entry)
    return entries


def _mcp_check(defs: Definitions, configs: tuple[str, ...]) -> list[str]:
    """Each MCP server starts and lists its tools, and every prompt's `mcp:` reference names one it allows."""
    listings = _mcp_listings(configs)
    problems: list[str] = []
    for server, listing in listings.items():
        if isinstance(listing, Exception):
            problems.append(f"mcp_servers.{server}: {listing}")
        else:
            click.echo(
                f"mcp server {server!r}: {_plural(len(listing), 'tool')} ({', '.join(t.exposed for t in listing)})"
            )
    for name, prompt in defs.prompts.items():
        for ref in prompt.tools:
            if not ref.startswith("mcp:"):
                continue
            server, _, tool = ref.removeprefix("mcp:").partition("/")
            listing = listings.get(server)  # an undeclared server is a problem of _config_problems
            if (
                listing is not None
                and tool
                and not isinstance(listing, Exception)
                and tool not in {t.name for t in listing}
            ):
                problems.append(f"prompt {name!r}: {ref!r}: MCP server {server!r} offers no allowed tool {tool!r}")
    return problems


def _print_entry(entry: dict[str, Any]) -> None:
    click.echo(f"{click.style(entry['name'], bold=True)} ({entry['kind']}): {entry['description']}")
    for note in entry.get("strict_notes", []):
        click.echo(f"    note: not strict: {note}")
    params = entry["parameters"]
    required = set(params.get("required", []))
    if not params.get("properties"):
        click.echo("    (no arguments)")
    for prop, schema in params.get("properties", {}).items():
        flag = "required" if prop in required else "optional"
        desc = f": {schema['description']}" if schema.get("description") else ""
        click.echo(f"    {prop} ({_type_label(schema)}, {flag}){desc}")


def _type_label(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        label = " | ".join(_type_label(s) for s in schema["anyOf"])
    elif schema.get("type") == "array":
        label = f"list of {_type_label(schema.get('items', {}))}"
    else:
        label = str(schema.get("type", "any"))
    return f"{label} | null" if schema.get("nullable") else label


def _dialect_warnings(defs: Definitions) -> list[str]:
    """Warnings (a provider cannot take a schema) and notes (a tool loses strict mode): never problems."""
    from orchestrator.definitions.schema import SchemaError, strict_notes, tool_parameters

    lines = []
    for name in defs.callable_names():
        args = defs.resolve_callable(name).args
        for dialect in _DIALECTS:
            try:
                params = tool_parameters(args, dialect)
            except SchemaError as exc:
                lines.append(f"warning: {name}: cannot be offered to {dialect}: {exc}")
                continue
            notes = strict_notes(params) if dialect == "openai" else []
            if notes:
                lines.append(f"note: {name}: sent to openai with strict: false ({'; '.join(notes)})")
    return lines


def _summary(defs: Definitions) -> str:
    exposed = sum(1 for a in defs.agents.values() if a.expose_as_tool)
    counts = [
        _plural(len(defs.tools), "tool"),
        _plural(len(defs.prompts), "prompt"),
        _plural(len(defs.agents), "agent") + (f" ({exposed} exposed as tools)" if exposed else ""),
        _plural(len(defs.hooks), "hook"),
    ]
    return ", ".join(counts)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _project_or_bundled(path: str, configs: tuple[str, ...]) -> tuple[str, tuple[str, ...], Path]:
    """This folder's project; in a folder without one (default paths, none there), the bundled examples."""
    if path != DEFAULT_PATH or Path(path).exists() or configs != (DEFAULT_CONFIG,) or Path(DEFAULT_CONFIG).exists():
        return path, configs, Path("cassettes")
    from orchestrator.cli.scaffold import bundled_project

    bundled = bundled_project()
    click.echo(
        "(no agents/ here: running the examples bundled with the package; `orchestrator init DIR` starts "
        "a project of your own)",
        err=True,
    )
    return str(bundled / "agents"), (str(bundled / "configs" / "default.yaml"),), bundled / "cassettes"


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--force", is_flag=True, help="Write into a directory that is not empty (files of the same name are replaced)."
)
def init(directory: Path, force: bool) -> None:
    """Start a new project in DIRECTORY: agents, a config, tests; it runs and tests with no key."""
    from orchestrator.cli.scaffold import ScaffoldError, init_project

    try:
        written = init_project(directory, force=force)
    except ScaffoldError as exc:
        raise click.ClickException(str(exc)) from None
    import shlex

    click.echo(f"created {len(written)} files in {directory}. Next:")
    for line in (
        f"cd {shlex.quote(str(directory))}",
        "orchestrator check",
        'orchestrator run weather_chat --model test -m "What is the weather in Oslo?"',
        "pip install -e '.[test]'   # what the tests need: pytest, pytest-asyncio",
        "pytest",
    ):
        click.echo(f"  {line}")


@main.command()
@click.argument("agent")
@click.option("--path", default=DEFAULT_PATH, show_default=True, help="The definitions folder.")
@click.option(
    "--config",
    "configs",
    multiple=True,
    default=[DEFAULT_CONFIG],
    show_default=True,
    help="Config YAML; repeat to merge a local override over the base.",
)
@click.option(
    "--model",
    help="Run every prompt on this model alias (e.g. fast; `test`: offline), "
    "or offline on a script file (turns.yaml) or a function (module:function).",
)
@click.option(
    "--record", type=click.Path(dir_okay=False), help="Record every provider request and response to this cassette."
)
@click.option(
    "--replay",
    "replay_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Replay a recorded cassette instead of calling providers.",
)
@click.option(
    "-m",
    "--message",
    "messages",
    multiple=True,
    help="A person's message (ai_human agents); repeat for several turns. Or pipe lines on stdin.",
)
@click.option("--arg", "args", multiple=True, help="A creation argument KEY=VALUE (VALUE may be JSON).")
@click.option("--db", help="Storage URL or SQLite path (default: the config's runtime.storage).")
@click.option("--log-level", default="WARNING", show_default=True, help="Structured logs go to stderr at this level.")
@click.option(
    "--traceback", "show_traceback", is_flag=True, help="On errors, print the traceback; show tools' stored tracebacks."
)
def run(
    agent: str,
    path: str,
    configs: tuple[str, ...],
    model: str | None,
    record: str | None,
    replay_file: str | None,
    messages: tuple[str, ...],
    args: tuple[str, ...],
    db: str | None,
    log_level: str,
    show_traceback: bool,
) -> None:
    """Run a conversation with AGENT and show it live.

    With no --model, agents on the embedded `demo` model replay their shipped
    cassette (cassettes/AGENT.json), so this works offline with no API key;
    `--model test` runs any agent offline. For an ai_human agent, each line
    piped on stdin is a person's message.
    """
    import asyncio

    from orchestrator.cli.errors import errors_as_messages
    from orchestrator.cli.session import SessionOptions, default_cassette, run_session
    from orchestrator.core.logs import configure_logging

    verbose = show_traceback or log_level.upper() == "DEBUG"
    _import_litellm_in_background()
    with _unless_recorded(record), errors_as_messages(traceback=verbose):
        configure_logging(log_level)
        path, configs, cassettes = _project_or_bundled(path, configs)
        if replay_file is None and model is None and record is None and _runs_on_scripted(path, configs, agent):
            cassette = default_cassette(agent, cassettes)
            if not cassette.exists():
                raise click.ClickException(
                    f"agent {agent!r} runs on the scripted demo model and {cassette} does not exist: pass "
                    "--model test to run it offline, --model ALIAS to run it live, or --replay FILE"
                )
            replay_file = str(cassette)
            click.echo(f"(offline: replaying {cassette}; pass --model ALIAS to run live)", err=True)
        interactive = not messages and sys.stdin.isatty()
        options = SessionOptions(
            agent=agent,
            path=path,
            config=configs,
            model=model,
            record=record,
            replay=replay_file,
            messages=messages or _recorded_messages(replay_file),
            arguments=_parse_args(args),
            storage=(db or ":memory:") if replay_file else db,
            interactive=interactive,
            read_stdin=not messages and not interactive and not replay_file,
            verbose=verbose,
            import_in_background=True,
            decisions="tty" if sys.stdin is not None and sys.stdin.isatty() else "stdin",
        )
        asyncio.run(run_session(options))
    if record:
        click.echo(f"recorded to {record}", err=True)


@contextlib.contextmanager
def _unless_recorded(record: str | None) -> Iterator[None]:
    """A failed `run --record FILE` says that nothing was recorded (the session writes only a whole run)."""
    try:
        yield
    except click.ClickException as exc:
        if not record:
            raise
        kept = "left as it was" if Path(record).exists() else "not written"
        raise click.ClickException(f"{exc.message}\nnothing recorded: the run failed, so {record} is {kept}") from None


@main.command()
@click.argument("cassette", type=click.Path(exists=True, dir_okay=False))
@click.option("--path", default=DEFAULT_PATH, show_default=True, help="The definitions folder.")
@click.option("--config", "configs", multiple=True, default=["configs/default.yaml"], show_default=True)
@click.option("--quiet", is_flag=True, help="Only print the verdict.")
@click.option("--traceback", "show_traceback", is_flag=True, help="On errors, print the traceback.")
def replay(cassette: str, path: str, configs: tuple[str, ...], quiet: bool, show_traceback: bool) -> None:
    """Re-run a recorded session and report whether its messages and tool calls match."""
    import asyncio

    from orchestrator.cli.session import SessionOptions, compare, run_session, transcript
    from orchestrator.core.logs import configure_logging
    from providers.cassette import load_cassette

    configure_logging("ERROR")
    meta = load_cassette(cassette).metadata
    if "agent" not in meta:
        raise click.ClickException(
            f"{cassette}: no 'agent' in the cassette's metadata; record it with `orchestrator run AGENT --record FILE`"
        )
    options = SessionOptions(
        agent=meta["agent"],
        path=path,
        config=configs,
        model=meta.get("model"),
        replay=cassette,
        messages=meta.get("messages", []),
        arguments=meta.get("arguments") or None,
        storage=":memory:",
        show=not quiet,
        decisions="none",  # a replay asks nobody: a recorded wait stays waiting
    )
    from orchestrator.cli.errors import errors_as_messages

    with errors_as_messages(traceback=show_traceback):
        _, messages = asyncio.run(run_session(options))
    problems = compare(meta.get("transcript", []), transcript(messages))
    for problem in problems:
        click.echo(problem)
    if problems:
        raise click.ClickException(f"{cassette}: {len(problems)} difference(s) from the recording")
    click.echo(f"{cassette}: replay matches the recording ({len(messages)} messages)")


@main.group()
def schema() -> None:
    """Print the JSON schemas clients code against."""


@schema.command("events")
@click.option("--indent", type=click.IntRange(0, 8), default=2, show_default=True, help="0: one line.")
def schema_events(indent: int) -> None:
    """The JSON schema of an event on the WebSocket and in the event log (also `GET /schema/events`)."""
    from orchestrator.core.event_types import events_json_schema

    click.echo(json.dumps(events_json_schema(), indent=indent or None, sort_keys=False))


def _import_litellm_in_background() -> None:
    """Start LiteLLM's import (seconds) now, beside loading definitions, config and storage,
    rather than after them: the first model request needs it either way."""
    import threading

    from orchestrator.engine.gc_policy import (
        freeze_heap_once,  # what `Runtime.open` does with `gc_freeze` on, done here instead
    )

    threading.Thread(target=freeze_heap_once, name="litellm-import", daemon=True).start()


def _runs_on_scripted(path: str, configs: tuple[str, ...], agent: str) -> bool:
    from orchestrator.core import settings  # noqa: F401 - registers the `runtime:` section's checks
    from orchestrator.definitions.loader import load_definitions
    from providers.config import load_config

    definitions, config = load_definitions(path), load_config(*configs)
    target = definitions.agents.get(agent)
    if target is None:
        raise click.ClickException(
            f"unknown agent {agent!r}; known agents: {', '.join(sorted(definitions.agents)) or 'none'}"
        )
    sides = [s for s in (target.side_a, target.side_b) if s is not None]
    prompts = [definitions.prompts[s.prompt] for s in sides if s.prompt in definitions.prompts]
    if any(p.model not in (None, *config.models) for p in prompts) or config.default_model is None:
        return False  # Runtime.open reports the unknown alias, naming the prompt
    return all(config.model_info(p.model).provider_type == "scripted" for p in prompts)


def _recorded_messages(cassette: str | None) -> tuple[str, ...]:
    if cassette is None:
        return ()
    from providers.cassette import load_cassette

    return tuple(load_cassette(cassette).metadata.get("messages", []))


def _parse_args(pairs: tuple[str, ...]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--arg")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out or None


def _register_commands() -> None:
    """Commands that live beside the code they drive (each imports lazily)."""
    from orchestrator.cli.fork import fork, rewind
    from orchestrator.cli.worker import worker
    from orchestrator.server.cli import serve
    from orchestrator.server.mcp_cli import mcp_serve

    main.add_command(serve)
    main.add_command(mcp_serve)
    main.add_command(worker)
    main.add_command(fork)
    main.add_command(rewind)


_register_commands()


def _register_eval() -> None:
    """`orchestrator eval` (orchestrator/eval/cli.py): suites of simulated users, pass^k."""
    from orchestrator.eval.cli import eval_group

    main.add_command(eval_group)


_register_eval()


if __name__ == "__main__":  # pragma: no cover
    main()
