"""The `orchestrator` command.

A click group, `main`; each command is a small function that imports what it
needs when it runs, so `orchestrator --help` stays fast (no LiteLLM, no
server). New commands join with `@main.command()`.
"""

from __future__ import annotations

import json
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


if __name__ == "__main__":  # pragma: no cover
    main()
