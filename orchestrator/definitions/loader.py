"""Discovery of a project's definitions folder (`agents/` by default).

The folder holds `tools/`, `prompts/`, `agents/` and `hooks/`. Each `.py` file
in them is one definition, bound at module level to the name of its kind
(`tool`, `prompt`, `agent`, `hook`; a tool may instead be one `@define_tool`
function under its own name); the file's stem is the definition's name.
The rules, each reported as a `Problem` naming the file and the rule:

- file names are snake_case (`[a-z][a-z0-9_]*`, at most 64 characters, the
  limit providers put on tool names); `__init__.py` and other files starting
  with `_` are helpers, not definitions, and are skipped;
- no nested folders (a `__pycache__` folder is fine);
- a file imports cleanly (the problem shows the file and line that failed);
- it binds its kind's name to a definition of that kind, and only one;
- a hook's file is named after its hook (`hooks/prefilter_llm_history.py`);
- tools, prompts and agents exposed as tools share one namespace, since every
  one of them is offered to models as a tool;
- every reference (a prompt's `tools`, a tool's `uses`, an agent's side
  prompts, `stop_tool` and `end_conversation_tool`) names something that
  exists; an unknown name comes with the closest existing names;
- tools declaring the same env name agree on its `scope` (who may set it);
- every `{name}` placeholder of a prompt is something that fills it: one of its
  `variables` (a default), a field of its arguments model (when called as a tool),
  or of the arguments model of an agent whose thread renders it (`{{` writes a brace);
  and the prompt's braces let the renderer fill them at all.

A definition with several problems reports each of them (`define_*` check every
option before raising), as does a pydantic model that refuses its fields.

Every problem is collected before anything is raised, so `orchestrator check`
can show them all at once. Modules load under a private package named after
the folder's absolute path, so two projects never collide in `sys.modules`,
and loading again re-imports (an edited file is seen).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import re
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from orchestrator.definitions.arg_types import unsupported_class
from orchestrator.definitions.define import (
    AgentDefinition,
    DefinitionError,
    DefinitionErrors,
    HookDefinition,
    PromptDefinition,
    ToolDefinition,
    _Definition,
)
from orchestrator.definitions.placeholders import line_of_placeholder, read_placeholders
from orchestrator.definitions.schema import JsonSchema, SchemaError, tool_spec

__all__ = [
    "CallableDefinition",
    "Definitions",
    "KINDS",
    "LoadError",
    "Problem",
    "UnknownNameError",
    "callable_description",
    "callable_kind",
    "load_definitions",
]

# folder -> (module-level name, definition class)
KINDS: dict[str, tuple[str, type[_Definition]]] = {
    "tools": ("tool", ToolDefinition),
    "prompts": ("prompt", PromptDefinition),
    "agents": ("agent", AgentDefinition),
    "hooks": ("hook", HookDefinition),
}
_SNAKE = re.compile(r"[a-z][a-z0-9_]*")
_MAX_NAME = 64

CallableDefinition = ToolDefinition | PromptDefinition | AgentDefinition
CallableKind = Literal["tool", "prompt", "agent"]


@dataclass(frozen=True)
class Problem:
    """One broken rule: where, which rule, and what to do about it."""

    file: str
    rule: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message} [{self.rule}]"


class LoadError(Exception):
    """The definitions folder breaks one or more rules; `problems` holds them all."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the definitions:"
        return "\n".join([head, *(str(p) for p in self.problems)])


class UnknownNameError(KeyError):
    """No tool, prompt or exposed agent has this name; the message suggests close ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class Definitions:
    """Everything one definitions folder declares, by name."""

    root: Path
    tools: dict[str, ToolDefinition] = field(default_factory=dict)
    prompts: dict[str, PromptDefinition] = field(default_factory=dict)
    agents: dict[str, AgentDefinition] = field(default_factory=dict)
    hooks: dict[str, HookDefinition] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def callable_names(self) -> list[str]:
        """What a model may be offered as a tool: tools, prompts, exposed agents."""
        exposed = [name for name, agent in self.agents.items() if agent.expose_as_tool]
        return [*self.tools, *self.prompts, *exposed]

    def resolve_callable(self, name: str) -> CallableDefinition:
        for table in (self.tools, self.prompts):
            if name in table:
                return table[name]
        agent = self.agents.get(name)
        if agent is not None and agent.expose_as_tool:
            return agent
        hint = _suggest(name, self.callable_names())
        raise UnknownNameError(f"no tool, prompt or exposed agent named {name!r}{hint}")

    def callable_spec(self, name: str, dialect: str = "openai") -> JsonSchema:
        """The tool dict (as `schema.tool_spec`) a model is offered for `name`."""
        defn = self.resolve_callable(name)
        return tool_spec(name, callable_description(defn), defn.args, dialect)


def callable_kind(defn: CallableDefinition) -> CallableKind:
    kinds: dict[type, CallableKind] = {ToolDefinition: "tool", PromptDefinition: "prompt", AgentDefinition: "agent"}
    return kinds[type(defn)]


def callable_description(defn: CallableDefinition) -> str:
    """What the model reads about a callable: a tool's description, else its tool_description."""
    if isinstance(defn, ToolDefinition):
        return defn.description
    return defn.tool_description or ""


def load_definitions(path: str | Path, *, collect: bool = False) -> Definitions:
    """Load and check a definitions folder.

    Raises `LoadError` listing every problem, unless `collect` is true: then
    the problems are in `Definitions.problems` beside whatever did load.
    """
    defs = _Loader(Path(path)).run()
    if defs.problems and not collect:
        raise LoadError(defs.problems)
    return defs


# --------------------------------------------------------------------------
# the loader
# --------------------------------------------------------------------------


class _Loader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.defs = Definitions(root=root)
        self.files: dict[tuple[str, str], Path] = {}  # (folder, name) -> file
        self.failed: dict[str, set[str]] = {kind: set() for kind in KINDS}

    def run(self) -> Definitions:
        if not self.root.is_dir():
            what = "does not exist" if not self.root.exists() else "is not a folder"
            self._problem(self.root, "root", f"the definitions folder {what}")
            return self.defs
        package = _fresh_package(self.root)
        self._check_root_folders()
        for kind in KINDS:
            self._load_kind(package, kind)
        self._check_unique_names()
        self._check_references()
        self._check_variable_scopes()
        self._check_placeholders()
        return self.defs

    def _problem(self, file: Path, rule: str, message: str, line: int | None = None) -> None:
        self.defs.problems.append(Problem(str(file), rule, message, line))

    def _check_root_folders(self) -> None:
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir() or entry.name in KINDS or entry.name.startswith((".", "_")):
                continue
            close = difflib.get_close_matches(entry.name, list(KINDS), n=1, cutoff=0.7)
            if close:
                self._problem(entry, "unknown-folder", f"unknown folder; did you mean {close[0]!r}?")

    def _load_kind(self, package: str, kind: str) -> None:
        folder = self.root / kind
        if not folder.exists():
            return
        if not folder.is_dir():
            self._problem(folder, "not-a-folder", f"{kind!r} must be a folder of definition files")
            return
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    self._problem(
                        entry,
                        "nested-folder",
                        f"nested folders are not allowed in {kind}/; move its files up into {kind}/",
                    )
                continue
            if entry.suffix != ".py" or entry.name.startswith("_"):
                continue
            if self._check_file_name(entry):
                self._load_file(package, kind, entry)

    def _check_file_name(self, file: Path) -> bool:
        stem = file.stem
        if not _SNAKE.fullmatch(stem):
            suggestion = re.sub(r"[^a-z0-9]+", "_", re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower())
            self._problem(
                file,
                "snake-case",
                f"file names must be snake_case (lowercase letters, digits, _): "
                f"rename to {suggestion.strip('_') + '.py'!r}",
            )
            return False
        if len(stem) > _MAX_NAME:
            self._problem(file, "name-too-long", f"name {stem!r} is longer than {_MAX_NAME} characters")
            return False
        return True

    def _load_file(self, package: str, kind: str, file: Path) -> None:
        attr, cls = KINDS[kind]
        stem = file.stem
        module = self._import(f"{package}.{kind}.{stem}", file)
        if module is None:
            self.failed[kind].add(stem)
            return
        value = getattr(module, attr, None)
        if value is None and kind == "tools":
            value = _decorated_tool(module)
        if value is None:
            self.failed[kind].add(stem)
            self._problem(
                file,
                "missing-definition",
                f"defines no module-level {attr!r}; a file in {kind}/ sets `{attr} = define_{attr}(...)`",
            )
            return
        if not isinstance(value, cls):
            self.failed[kind].add(stem)
            got = type(value).__name__
            self._problem(file, "wrong-kind", f"{attr!r} must be a {cls.__name__} (from define_{attr}), got {got}")
            return
        if not self._check_one_per_file(module, attr, value, file):
            return
        if isinstance(value, HookDefinition) and value.hook != stem:
            self._problem(
                file,
                "hook-name",
                f"a hook file is named after its hook: define_hook({value.hook!r}, ...) "
                f"belongs in hooks/{value.hook}.py",
            )
            return
        getattr(self.defs, kind)[stem] = value.named(stem)
        self.files[(kind, stem)] = file

    def _import(self, module_name: str, file: Path) -> types.ModuleType | None:
        try:
            return importlib.import_module(module_name)
        except DefinitionError as exc:  # each problem of the definition, on a line of its own
            for error in exc.errors if isinstance(exc, DefinitionErrors) else [exc]:
                rule = "unsupported-argument-type" if isinstance(error, SchemaError) else "invalid-definition"
                self._problem(file, rule, str(error), _error_line(exc, file))
        except ValidationError as exc:  # e.g. Side(max_steps=0): pydantic's check, one problem per field
            for detail in exc.errors():
                loc = ".".join(str(part) for part in detail["loc"])
                message = f"{exc.title}: {loc + ': ' if loc else ''}{detail['msg']}, got {detail.get('input')!r:.80}"
                self._problem(file, "invalid-definition", message, _error_line(exc, file))
        except (Exception, SystemExit) as exc:
            line = _error_line(exc, file)
            refused = unsupported_class(exc) if isinstance(exc, Exception) else None
            if refused is not None:  # pydantic's own text would suggest arbitrary_types_allowed
                class_name, reason = refused
                field = _class_field(file, line, class_name)
                self._problem(file, "unsupported-argument-type", f"{field}: {reason}" if field else reason, line)
            else:
                self._problem(file, "import-error", f"cannot import: {type(exc).__name__}: {exc}", line)
        sys.modules.pop(module_name, None)
        return None

    def _check_one_per_file(self, module: types.ModuleType, attr: str, value: Any, file: Path) -> bool:
        others = [
            name
            for name, other in vars(module).items()
            if isinstance(other, _Definition) and other is not value and not name.startswith("__")
        ]
        if others:
            self._problem(
                file,
                "one-per-file",
                f"one definition per file: {', '.join(repr(n) for n in others)} beside {attr!r}; "
                "move each into its own file",
            )
            return False
        return True

    def _check_unique_names(self) -> None:
        seen: dict[str, Path] = {}
        for kind in ("tools", "prompts", "agents"):
            for name, defn in list(getattr(self.defs, kind).items()):
                if isinstance(defn, AgentDefinition) and not defn.expose_as_tool:
                    continue
                file = self.files[(kind, name)]
                if name in seen:
                    self._problem(
                        file,
                        "duplicate-name",
                        f"{name!r} is already defined by {seen[name]}; tools, prompts and exposed "
                        "agents share one namespace (every one is offered to models as a tool)",
                    )
                else:
                    seen[name] = file

    def _check_references(self) -> None:
        failed_callables = self.failed["tools"] | self.failed["prompts"] | self.failed["agents"]
        callables = set(self.defs.callable_names()) | failed_callables
        not_callable = "which is not a tool, prompt or exposed agent"
        for name, tool in self.defs.tools.items():
            for ref in tool.uses:
                self._reference(("tools", name), f"tool {name!r} uses {ref!r}, {not_callable}", ref, callables)
        for name, prompt in self.defs.prompts.items():
            for ref in prompt.tools:
                if ref.startswith("mcp:"):
                    continue  # an MCP server's tools: checked against the config (`orchestrator check --config`)
                what = f"prompt {name!r} lists tool {ref!r}, {not_callable}"
                self._reference(("prompts", name), what, ref, callables)
        for name, agent in self.defs.agents.items():
            for label, side in (("side_a", agent.side_a), ("side_b", agent.side_b)):
                if side is not None:
                    self._check_side(name, label, side, callables)
            if agent.approver is not None:
                prompts = set(self.defs.prompts) | self.failed["prompts"]
                what = f"agent {name!r} approver {agent.approver!r} is not a prompt"
                self._reference(("agents", name), what, agent.approver, prompts)

    def _check_variable_scopes(self) -> None:
        from orchestrator.definitions.variables import scope_conflicts

        for tool, name, other in scope_conflicts(self.defs.tools):
            scope = next(v.scope for v in self.defs.tools[tool].variables if v.name == name)
            self._problem(
                self.files[("tools", tool)],
                "variable-scope",
                f"tool {tool!r} declares env value {name!r} with scope={scope!r}, but tool {other!r} declares it "
                "with another scope; one name has one scope (who may set it): make them agree",
                _line_of(self.files[("tools", tool)], name),
            )

    def _check_placeholders(self) -> None:
        """Each prompt's `{name}`s against what fills them (see the module doc)."""
        renderers = _agents_rendering(self.defs)
        for name, prompt in self.defs.prompts.items():
            file = self.files[("prompts", name)]
            found = read_placeholders(prompt.prompt)
            if found.unreadable is not None and found.names:
                listed = ", ".join("{" + n + "}" for n in found.names)
                self._problem(
                    file,
                    "unreadable-placeholders",
                    f"prompt {name!r}: its braces cannot be filled ({found.unreadable}), so the prompt is sent "
                    f"as written and {listed} stay unfilled; write a brace that is text as {{{{ or }}}}",
                    _placeholder_line(file, found.names[0]),
                )
                continue
            if self.failed["agents"]:
                continue  # an agent that did not load may be the one whose arguments fill them
            known = set(prompt.variables) | _fields(prompt.args)
            for agent in renderers.get(name, ()):
                known |= _fields(self.defs.agents[agent].args)
            for placeholder in found.names:
                if placeholder not in known:
                    self._problem(
                        file,
                        "unknown-placeholder",
                        f"prompt {name!r}: placeholder {{{placeholder}}} is not one of its variables or "
                        f"arguments, nor an argument of an agent running it{_suggest_name(placeholder, known)}; "
                        f"give it a default in variables=, or write {{{{{placeholder}}}}} for the braces as text",
                        _placeholder_line(file, placeholder),
                    )

    def _check_side(self, agent: str, label: str, side: Any, callables: set[str]) -> None:
        key = ("agents", agent)
        prompts = set(self.defs.prompts) | self.failed["prompts"]
        what = f"agent {agent!r} {label} uses prompt {side.prompt!r}, which does not exist"
        if not self._reference(key, what, side.prompt, prompts):
            return
        prompt = self.defs.prompts.get(side.prompt)
        for option in ("stop_tool", "end_conversation_tool"):
            ref = getattr(side, option)
            what = f"agent {agent!r} {label} {option} {ref!r} is not a tool, prompt or exposed agent"
            if ref is None or not self._reference(key, what, ref, callables):
                continue
            if prompt is not None and ref not in prompt.tools:
                self._problem(
                    self.files[key],
                    "tool-not-offered",
                    f"agent {agent!r} {label} {option} {ref!r} is not among prompt {side.prompt!r}'s "
                    "tools, so its model can never call it; add it to that prompt's tools",
                    _line_of(self.files[key], ref),
                )

    def _reference(self, key: tuple[str, str], what: str, ref: str, known: set[str]) -> bool:
        if ref in known:
            return True
        file = self.files[key]
        hint = _suggest(ref, sorted(known))
        self._problem(file, "unknown-reference", what + hint, _line_of(file, ref))
        return False


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _fresh_package(root: Path) -> str:
    """Make (again) the private package the folder's modules load under."""
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    package = f"_orchestrator_defs_{digest}"
    # a copy first: another thread may be importing (the CLI imports LiteLLM beside loading), and iterating
    # sys.modules itself then fails with "dictionary changed size during iteration"
    for name in [n for n in tuple(sys.modules) if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    _package_module(package, root)
    for kind in KINDS:
        _package_module(f"{package}.{kind}", root / kind)
    return package


def _package_module(name: str, folder: Path) -> None:
    module = types.ModuleType(name, f"definitions loaded from {folder}")
    module.__path__ = [str(folder)]
    module.__package__ = name
    sys.modules[name] = module


def _decorated_tool(module: types.ModuleType) -> ToolDefinition | None:
    """The file's one `@define_tool` function, bound under its own name; else None.

    Only a decorated function qualifies (its `execute` carries the name it is
    bound to): `my_tool = define_tool(execute=...)` is still a misnamed binding.
    """
    found = [
        value
        for name, value in vars(module).items()
        if isinstance(value, ToolDefinition) and getattr(value.execute, "__name__", None) == name
    ]
    return found[0] if len(found) == 1 else None


def _error_line(exc: BaseException, file: Path) -> int | None:
    """The line of `file` the error came from: its own syntax error, else its deepest frame."""
    target = file.resolve()
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == target:
        return exc.lineno
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename).resolve() == target:
            return frame.lineno
    return None


def _agents_rendering(defs: Definitions) -> dict[str, set[str]]:
    """prompt -> the agents whose threads render it: as a side, or called as a tool (at any depth) from one."""
    out: dict[str, set[str]] = {}
    for agent_name, agent in defs.agents.items():
        todo = [side.prompt for side in (agent.side_a, agent.side_b) if side is not None]
        while todo:
            prompt = todo.pop()
            if prompt in defs.prompts and agent_name not in out.setdefault(prompt, set()):
                out[prompt].add(agent_name)
                todo += [t for t in defs.prompts[prompt].tools if t in defs.prompts]
    return out


def _fields(args: type[BaseModel] | None) -> set[str]:
    if args is None:
        return set()
    return set(args.model_fields) | {f.alias for f in args.model_fields.values() if f.alias}


def _suggest_name(name: str, known: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(known))})" if known else " (it declares no variables)"


def _placeholder_line(file: Path, name: str) -> int | None:
    try:
        return line_of_placeholder(file.read_text(encoding="utf-8"), name)
    except OSError:
        return None


def _class_field(file: Path, line: int | None, class_name: str) -> str | None:
    """`Model.field` for the field of the class defined at `line` whose annotation names `class_name`."""
    import ast

    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and line in (node.lineno, *(d.lineno for d in node.decorator_list)):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    named = {n.id for n in ast.walk(item.annotation) if isinstance(n, ast.Name)}
                    named |= {n.attr for n in ast.walk(item.annotation) if isinstance(n, ast.Attribute)}
                    if class_name in named:
                        return f"{node.name}.{item.target.id}"
            return node.name
    return None


def _line_of(file: Path, name: str) -> int | None:
    """The first line quoting `name`, so an unknown reference points at itself."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for number, text in enumerate(lines, start=1):
        if f'"{name}"' in text or f"'{name}'" in text:
            return number
    return None


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if known:
        shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
        return f" (known: {shown})"
    return " (nothing is defined)"
