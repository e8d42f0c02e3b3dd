"""A Python run's source, checked on the host and rewritten into the snippets Monty runs.

Monty (see `python.py`) runs snippets one after another in one session and cannot
import source modules, so three things happen here first, with the standard `ast`
(parsing only: nothing of the guest's runs in the host):

- each import is checked against the run's allowlist; one outside it becomes, in
  place, a ``raise ImportError(...)``, so the guest sees the error where CPython
  would raise it (and may catch it);
- each module of the module map becomes a namespace object, built by a loader
  snippet fed before the entry (its body indented into a function, so its names
  stay its own), and ``import helpers`` / ``from helpers import add`` become reads
  of that object;
- the entry's last expression is kept in a name, and a driver appended after the
  entry calls ``execute.fn`` (or takes that value) and encodes the answer as JSON
  inside the guest, so no more than the result limit crosses back.

Edits keep every line where it was, so the engine's tracebacks map back to the
guest's own files and lines (`Program.origin`); driver lines map to nothing.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from dataclasses import dataclass, field

SOURCE_LIMIT = 1024 * 1024  # characters of source and modules together: parsing runs on the host's loop
PREFIX = "__sandbox_"  # names the rewrite introduces; guest code should not use them


class SourceError(Exception):
    """The source cannot be run (syntax, size, module cycle); the message is for the guest's author."""

    def __init__(self, message: str, stack: str | None = None) -> None:
        super().__init__(message)
        self.stack = stack


@dataclass
class Snippet:
    """One feed to the engine, and where each of its lines came from."""

    code: str
    lines: dict[int, tuple[str, int]] = field(default_factory=dict)  # snippet line -> (file, line)


@dataclass
class Program:
    snippets: list[Snippet]
    sources: dict[str, list[str]]  # file name -> its lines, for tracebacks
    encode_line: int  # the line of the last snippet that encodes the answer as JSON

    def origin(self, snippet: int, line: int) -> tuple[str, int] | None:
        if 0 <= snippet < len(self.snippets):
            return self.snippets[snippet].lines.get(line)
        return None


def prepare(
    source: str, *, entry: str, modules: dict[str, str], imports: list[str], fn: str, result_limit: int
) -> Program:
    """The snippets for one run: module loaders (in dependency order), then the entry with its driver."""
    if len(source) + sum(map(len, modules.values())) > SOURCE_LIMIT:
        raise SourceError(f"the program is over the sandbox's limit of {SOURCE_LIMIT} characters")
    local = {path[1:-3]: text for path, text in modules.items()}  # "/helpers.py" -> "helpers"
    trees = {name: _parse(text, f"/{name}.py") for name, text in local.items()}
    entry_tree = _parse(source, entry)
    allowed = set(imports)
    exported = {name: _top_level_names(tree) for name, tree in trees.items()}
    snippets: list[Snippet] = []
    for name in _load_order(trees):
        body = _rewrite_imports(local[name], trees[name], allowed, exported)
        snippets.append(_loader(name, body, exported[name]))
    text = _rewrite_imports(source, entry_tree, allowed, exported, keep_tail=True)
    main, encode_line = _with_driver(text, entry, entry_tree, fn, result_limit)
    snippets.append(main)
    sources = {f"/{name}.py": text.splitlines() for name, text in local.items()}
    sources[entry] = source.splitlines()
    return Program(snippets, sources, encode_line)


def _parse(text: str, filename: str) -> ast.Module:
    try:
        return ast.parse(text, filename=filename)
    except SyntaxError as exc:
        where = f'  File "{filename}", line {exc.lineno}\n    {(exc.text or "").strip()}\n'
        raise SourceError(f"SyntaxError: {exc.msg}", f"{where}SyntaxError: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:  # nesting past the parser's stack; NUL bytes
        raise SourceError(f"SyntaxError: {filename} cannot be parsed ({type(exc).__name__})") from None


def _top_level_names(tree: ast.Module) -> list[str]:
    """Names a module binds at its top level: what `import` of it exposes."""
    names: set[str] = set()
    for statement in tree.body:
        for node in _walk_scope(statement):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias) and node.name != "*":
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
    return sorted(name for name in names if not name.startswith(PREFIX))


def _walk_scope(node: ast.AST) -> list[ast.AST]:
    """`node` and what it holds, without entering the bodies of functions, classes and lambdas."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        found.append(current)
        if current is not node and isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(current, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            continue
        stack.extend(ast.iter_child_nodes(current))
    return found


def _local_imports(tree: ast.Module, local: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in local}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in local:
            found.add(node.module)
    return found


def _load_order(trees: dict[str, ast.Module]) -> list[str]:
    """Modules after the modules they import; a cycle is an error (a loader runs a module whole)."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise SourceError(f"ImportError: the modules import each other in a cycle: {cycle}")
        state[name] = "visiting"
        for other in sorted(_local_imports(trees[name], set(trees))):
            visit(other, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in sorted(trees):
        visit(name, [])
    return order


# --------------------------------------------------------------------------
# in-place edits
# --------------------------------------------------------------------------


@dataclass(order=True)
class _Edit:
    line: int  # 1-based
    column: int  # characters, not bytes
    end_line: int
    end_column: int
    text: str


def _rewrite_imports(
    text: str, tree: ast.Module, allowed: set[str], exported: dict[str, list[str]], keep_tail: bool = False
) -> str:
    lines = text.splitlines(keepends=True)
    edits = [
        _edit(lines, node, _import_replacement(node, allowed, exported))
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    final = tree.body[-1] if tree.body else None
    if keep_tail and isinstance(final, ast.Expr):
        edits.append(_edit(lines, final, None))
    return _apply(lines, [edit for edit in edits if edit is not None])


def _import_replacement(node: ast.Import | ast.ImportFrom, allowed: set[str], exported: dict[str, list[str]]) -> str:
    """The statements an import becomes, on one line; the original text when nothing changes."""
    modules = f"{PREFIX}modules"
    if isinstance(node, ast.ImportFrom):
        if node.module == "__future__":
            return "pass"
        if node.level:
            return _refusal(f"relative import from {'.' * node.level}{node.module or ''}: use `import name`")
        name = node.module or ""
        if name in exported:
            if node.names[0].name == "*":
                pairs = [(attr, attr) for attr in exported[name] if not attr.startswith("_")]
            else:
                pairs = [(alias.asname or alias.name, alias.name) for alias in node.names]
            return "; ".join(f'{target} = {modules}["{name}"].{attr}' for target, attr in pairs) or "pass"
        return ast.unparse(node) if name.split(".")[0] in allowed else _refusal(f"import of {name!r}")
    parts = []
    for alias in node.names:
        root = alias.name.split(".")[0]
        if alias.name in exported:
            parts.append(f'{alias.asname or alias.name} = {modules}["{alias.name}"]')
        elif root in allowed and root not in exported:
            parts.append(ast.unparse(ast.Import(names=[alias])))
        else:
            parts.append(_refusal(f"import of {alias.name!r}"))
    return "; ".join(parts)


def _refusal(what: str) -> str:
    message = f"{what} is not allowed in the sandbox (see run_code's 'imports')"
    return f"raise ImportError({json.dumps(message)})"


def _edit(lines: list[str], node: ast.stmt, replacement: str | None) -> _Edit | None:
    """Replace `node`'s text (or, with None, wrap it as the kept tail) without moving any line."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    start = _column(lines[node.lineno - 1], node.col_offset)
    end = _column(lines[node.end_lineno - 1], node.end_col_offset)
    if replacement is None:
        span = _span(lines, node.lineno, start, node.end_lineno, end)
        return _Edit(node.lineno, start, node.end_lineno, end, f"{PREFIX}tail = ({span})")
    if replacement == ast.unparse(node) and node.lineno == node.end_lineno:
        return None
    continuation = " \\\n" * (node.end_lineno - node.lineno)  # the same number of lines
    return _Edit(node.lineno, start, node.end_lineno, end, replacement + continuation)


def _column(line: str, byte_offset: int) -> int:
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))


def _span(lines: list[str], line: int, column: int, end_line: int, end_column: int) -> str:
    if line == end_line:
        return lines[line - 1][column:end_column]
    middle = "".join(lines[line : end_line - 1])
    return lines[line - 1][column:] + middle + lines[end_line - 1][:end_column]


def _apply(lines: list[str], edits: list[_Edit]) -> str:
    for edit in sorted(edits, reverse=True):  # later edits first: earlier positions stay valid
        head = lines[edit.line - 1][: edit.column]
        tail = lines[edit.end_line - 1][edit.end_column :]
        replaced = (head + edit.text + tail).splitlines(keepends=True) or [""]
        lines[edit.line - 1 : edit.end_line] = replaced
    return "".join(lines)


# --------------------------------------------------------------------------
# loaders and the driver
# --------------------------------------------------------------------------


def _loader(name: str, body: str, exported: list[str]) -> Snippet:
    """`name`'s module as a function building its namespace object (its names stay out of the entry's)."""
    head = [
        f"class {PREFIX}Module:",
        "    pass",
        "try:",
        f"    {PREFIX}modules",
        "except NameError:",
        f"    {PREFIX}modules = {{}}",
        f"def {PREFIX}load():",
    ]
    indented = _indent(body)
    tail = [f"    {PREFIX}module = {PREFIX}Module()"]
    for attr in exported:
        tail += ["    try:", f"        {PREFIX}module.{attr} = {attr}", "    except NameError:", "        pass"]
    tail += [f"    return {PREFIX}module", f'{PREFIX}modules["{name}"] = {PREFIX}load()']
    code = "\n".join([*head, *indented, *tail]) + "\n"
    offset = len(head)
    lines = {offset + number: (f"/{name}.py", number) for number in range(1, len(indented) + 1)}
    return Snippet(code, lines)


def _indent(body: str) -> list[str]:
    """Each line indented one level, except lines inside a multi-line string (their text must not change)."""
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(body).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                inside.update(range(token.start[0] + 1, token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):  # parsed already: cannot happen, but never indent blindly
        pass
    lines = body.splitlines() or ["pass"]
    indented = [line if number in inside else "    " + line for number, line in enumerate(lines, start=1)]
    return [*indented, "    pass"] if not any(line.strip() for line in lines) else indented


def _with_driver(text: str, entry: str, tree: ast.Module, fn: str, result_limit: int) -> tuple[Snippet, int]:
    """The entry, then lines that pick the answer and encode it as JSON inside the guest."""
    lines = text.splitlines()
    bound = set(_top_level_names(tree))
    has_tail = bool(tree.body) and isinstance(tree.body[-1], ast.Expr)
    if fn in bound:
        value = f"{fn}(*{PREFIX}args)"
    elif fn == "default":
        value = f"{PREFIX}tail" if has_tail else "None"
    else:
        value = "None"
        lines.append(f"raise NameError({json.dumps(f'the module defines no function {fn!r}')})")
    driver = [
        f"{PREFIX}value = {value}",
        f"import json as {PREFIX}json",
        f"{PREFIX}text = {PREFIX}json.dumps({PREFIX}value, allow_nan=False)",
        f"{PREFIX}text if len({PREFIX}text) <= {result_limit} else len({PREFIX}text)",
    ]
    user = len(text.splitlines())
    code = "\n".join([*lines, *driver]) + "\n"
    origins = {number: (entry, number) for number in range(1, user + 1)}
    return Snippet(code, origins), len(lines) + 3
