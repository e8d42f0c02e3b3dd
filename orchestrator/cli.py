"""The `orchestrator` command.

A click group, `main`; each command is a small function that imports what it
needs when it runs, so `orchestrator --help` stays fast (no LiteLLM, no
server). New commands join with `@main.command()`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from .loader import Definitions

DEFAULT_PATH = "agents"
_DIALECTS = ("openai", "anthropic", "gemini")  # = schema.DIALECTS, spelled here to keep --help light


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="orchestrator", message="%(prog)s %(version)s")
def main() -> None:
    """Run and inspect two-sided LLM agents defined in an agents/ folder."""


@main.command()
@click.argument("path", default=DEFAULT_PATH, type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Check a definitions folder and print every problem found.

    Exits with status 1 if there is any. Schemas a provider cannot take are
    printed as warnings: they matter only when that provider is used.
    """
    from .loader import load_definitions

    defs = load_definitions(path, collect=True)
    for problem in defs.problems:
        click.echo(str(problem))
    for warning in _dialect_warnings(defs):
        click.echo(f"warning: {warning}")
    if defs.problems:
        count = len(defs.problems)
        click.echo(f"{count} problem{'s' if count != 1 else ''} found in {path}", err=True)
        raise SystemExit(1)
    click.echo(f"{path}: {_summary(defs)}; no problems")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of tools with their schemas.")
@click.option("--path", default=DEFAULT_PATH, show_default=True, type=click.Path(path_type=Path),
              help="The definitions folder.")  # fmt: skip
@click.option("--dialect", type=click.Choice(_DIALECTS), default="openai", show_default=True,
              help="Which provider's schema dialect to print.")  # fmt: skip
def tools(as_json: bool, path: Path, dialect: str) -> None:
    """List what models can call (tools, prompts, exposed agents) with their JSON schemas."""
    from .loader import LoadError, load_definitions

    try:
        defs = load_definitions(path)
    except LoadError as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(1) from None
    entries = [_tool_entry(defs, name, dialect) for name in defs.callable_names()]
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    for entry in entries:
        _print_entry(entry)


def _tool_entry(defs: Definitions, name: str, dialect: str) -> dict[str, Any]:
    from .loader import callable_description, callable_kind
    from .schema import SchemaError, is_strict_compatible, tool_parameters

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
        entry["strict"] = is_strict_compatible(parameters)
    return entry


def _print_entry(entry: dict[str, Any]) -> None:
    click.echo(f"{click.style(entry['name'], bold=True)} ({entry['kind']}): {entry['description']}")
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
    from .schema import SchemaError, is_strict_compatible, tool_parameters

    warnings = []
    for name in defs.callable_names():
        args = defs.resolve_callable(name).args
        for dialect in _DIALECTS:
            try:
                params = tool_parameters(args, dialect)
            except SchemaError as exc:
                warnings.append(f"{name}: cannot be offered to {dialect}: {exc}")
                continue
            if dialect == "openai" and not is_strict_compatible(params):
                warnings.append(f"{name}: sent to openai without strict mode (a record cannot be strict)")
    return warnings


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


@main.command()
@click.argument("agent")
@click.option("--path", default=DEFAULT_PATH, show_default=True, help="The definitions folder.")
@click.option("--config", "configs", multiple=True, default=["configs/default.yaml"], show_default=True,
              help="Config YAML; repeat to merge a local override over the base.")  # fmt: skip
@click.option("--model", help="Run every prompt on this model alias, live (e.g. fast, smart).")
@click.option("--record", type=click.Path(dir_okay=False), help="Record every provider request and response to this cassette.")
@click.option("--replay", "replay_file", type=click.Path(exists=True, dir_okay=False), help="Replay a recorded cassette instead of calling providers.")
@click.option("-m", "--message", "messages", multiple=True, help="A person's message (ai_human agents); repeat for several turns.")
@click.option("--arg", "args", multiple=True, help="A creation argument KEY=VALUE (VALUE may be JSON).")
@click.option("--db", help="Storage URL or SQLite path (default: the config's runtime.storage).")
@click.option("--log-level", default="WARNING", show_default=True, help="Structured logs go to stderr at this level.")
def run(agent: str, path: str, configs: tuple[str, ...], model: str | None, record: str | None, replay_file: str | None,
        messages: tuple[str, ...], args: tuple[str, ...], db: str | None, log_level: str) -> None:  # fmt: skip
    """Run a conversation with AGENT and show it live.

    With no --model, agents on the embedded `demo` model replay their shipped
    cassette (cassettes/AGENT.json), so this works offline with no API key.
    """
    import asyncio

    from .logs import configure_logging
    from .session import SessionOptions, default_cassette, run_session

    configure_logging(log_level)
    if replay_file is None and model is None and record is None and _runs_on_scripted(path, configs, agent):
        cassette = default_cassette(agent)
        if not cassette.exists():
            raise click.ClickException(f"agent {agent!r} runs on the scripted demo model and {cassette} does not exist: pass --model ALIAS to run it live, or --replay FILE")
        replay_file = str(cassette)
        click.echo(f"(offline: replaying {cassette}; pass --model ALIAS to run live)", err=True)
    interactive = not messages and sys.stdin.isatty()
    options = SessionOptions(agent=agent, path=path, config=configs, model=model, record=record, replay=replay_file,
                             messages=messages or _recorded_messages(replay_file), arguments=_parse_args(args),
                             storage=(db or ":memory:") if replay_file else db, interactive=interactive)  # fmt: skip
    try:
        asyncio.run(run_session(options))
    except Exception as exc:  # one clear line, not a traceback
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    if record:
        click.echo(f"recorded to {record}", err=True)


@main.command()
@click.argument("cassette", type=click.Path(exists=True, dir_okay=False))
@click.option("--path", default=DEFAULT_PATH, show_default=True, help="The definitions folder.")
@click.option("--config", "configs", multiple=True, default=["configs/default.yaml"], show_default=True)
@click.option("--quiet", is_flag=True, help="Only print the verdict.")
def replay(cassette: str, path: str, configs: tuple[str, ...], quiet: bool) -> None:
    """Re-run a recorded session and report whether its messages and tool calls match."""
    import asyncio

    from providers.cassette import load_cassette

    from .logs import configure_logging
    from .session import SessionOptions, compare, run_session, transcript

    configure_logging("ERROR")
    meta = load_cassette(cassette).metadata
    if "agent" not in meta:
        raise click.ClickException(f"{cassette}: no 'agent' in the cassette's metadata; record it with `orchestrator run AGENT --record FILE`")
    options = SessionOptions(agent=meta["agent"], path=path, config=configs, replay=cassette, messages=meta.get("messages", []),
                             arguments=meta.get("arguments") or None, storage=":memory:", show=not quiet)  # fmt: skip
    try:
        _, messages = asyncio.run(run_session(options))
    except Exception as exc:
        raise click.ClickException(f"replay failed: {type(exc).__name__}: {exc}") from None
    problems = compare(meta.get("transcript", []), transcript(messages))
    for problem in problems:
        click.echo(problem)
    if problems:
        raise click.ClickException(f"{cassette}: {len(problems)} difference(s) from the recording")
    click.echo(f"{cassette}: replay matches the recording ({len(messages)} messages)")


def _runs_on_scripted(path: str, configs: tuple[str, ...], agent: str) -> bool:
    from providers.config import load_config

    from .loader import load_definitions

    definitions, config = load_definitions(path), load_config(*configs)
    target = definitions.agents.get(agent)
    if target is None:
        raise click.ClickException(f"unknown agent {agent!r}; known agents: {', '.join(sorted(definitions.agents)) or 'none'}")
    sides = [s for s in (target.side_a, target.side_b) if s is not None]
    return all(config.model_info(definitions.prompts[s.prompt].model).provider_type == "scripted" for s in sides)


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
    from .server.cli import serve
    from .worker_cli import worker

    main.add_command(serve)
    main.add_command(worker)


_register_commands()


def _register_eval() -> None:
    """`orchestrator eval` (orchestrator/eval/cli.py): suites of simulated users, pass^k."""
    from .eval.cli import eval_group

    main.add_command(eval_group)


_register_eval()


if __name__ == "__main__":  # pragma: no cover
    main()
