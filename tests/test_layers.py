"""Imports point down: a module imports from its own layer and the layers below it, never from one above.

The layers, bottom to top (docs/architecture.md draws them):

1. `providers`: model access, its own package (it never imports `orchestrator`);
2. `orchestrator.core`: the plain values every layer shares, settings, logs, secrets redaction, spans;
3. `orchestrator.sandbox`: `run_code`'s engines, which know nothing of agents;
4. `orchestrator.definitions`: what a project defines, the `ThreadState` its tools see, how a folder is read;
5. `orchestrator.storage`: what a thread keeps (messages, values, env, events, leases) and its backends;
6. `orchestrator.engine`, `orchestrator.mcp`: running a thread (execution, turn, step, tool calls);
7. `orchestrator.runtime`, `orchestrator.thread`, `orchestrator.model_checks`: the `Runtime` and `Thread`;
8. surfaces: `orchestrator.cli`, `orchestrator.server`, `orchestrator.eval`, `orchestrator.temporal`,
   `orchestrator.testing`, and the package's public face `orchestrator` itself.

Every import counts: at module level, inside functions and under `TYPE_CHECKING` (a type a layer
names is a layer it depends on). A module in no layer fails the test, so a new one gets placed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS: tuple[tuple[str, ...], ...] = (
    ("providers",),
    ("orchestrator.core",),
    ("orchestrator.sandbox",),
    ("orchestrator.definitions",),
    ("orchestrator.storage",),
    ("orchestrator.engine", "orchestrator.mcp"),
    ("orchestrator.runtime", "orchestrator.thread", "orchestrator.model_checks"),
    ("orchestrator.cli", "orchestrator.server", "orchestrator.eval", "orchestrator.temporal", "orchestrator.testing"),
)
PUBLIC_FACE = "orchestrator"  # the package's __init__: the public names, loaded lazily; a surface


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("orchestrator", "providers"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "templates" in parts or "bundled" in parts:
                continue  # files copied into users' projects, not modules of ours
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def layer_of(module: str) -> int:
    if module == PUBLIC_FACE:
        return len(LAYERS) - 1
    for index, prefixes in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    raise LookupError(module)


def _imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((node.lineno, target))
    return found


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for module in _modules():
        try:
            layer_of(module)
        except LookupError:
            unplaced.append(module)
    assert not unplaced, f"modules in no layer (add them to a layer's folder, see this file's docstring): {unplaced}"


def test_imports_point_down() -> None:
    known = _modules()
    upward = []
    for module, path in sorted(known.items()):
        own = layer_of(module)
        for line, target in _imports(module, path, known):
            if layer_of(target) > own:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target} (a layer above)")
    assert not upward, "\n".join(upward)


def test_providers_never_import_the_runtime() -> None:
    known = _modules()
    for module, path in known.items():
        if module.startswith("providers"):
            assert not any(t.startswith("orchestrator") for _, t in _imports(module, path, known)), module
