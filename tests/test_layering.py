"""The import layering of engine/ and frame/: who may import whom, read from the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import modules of its own layer or a lower one, never a higher one;
# the longest matching prefix places a module. A new frame module must be placed here on purpose.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("engine core", ("engine",)),
    ("engine models", ("engine.sdxl", "engine.convert", "engine.quantize")),
    ("frame parts", ("frame", "frame.paths", "frame.userfiles", "frame.pictures", "frame.display", "frame.themes",
                     "frame.history", "frame.jobs", "frame.notify", "frame.control", "frame.loratags",
                     "frame.power", "frame.models", "frame.pairing")),
    ("frame config", ("frame.config",)),
    ("frame services", ("frame.buttons", "frame.scheduler", "frame.worker", "frame.configsave")),
    ("frame daemon", ("frame.daemon", "frame.commands")),
    ("web app", ("frame.web",)),   # reaches the daemon through frame.control only, never frame.daemon
    ("command line", ("frame.cli",)),
]
PLACED_EXACTLY = {"frame"}  # the bare package "frame" holds nothing; its children need their own entry


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for top in ("engine", "frame") for p in sorted((ROOT / top).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str], text: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import of an engine or frame module,
    lazy ones inside functions included. `from pkg import sub` counts as importing pkg.sub."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found.append((target, node.lineno, id(node) in top_level))
    return found


def _layer(name: str) -> int | None:
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact_only = prefix in PLACED_EXACTLY
            matches = name == prefix or (not exact_only and name.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


SOURCES = _sources()
IMPORTS = {name: _imports(name, path, set(SOURCES)) for name, path in SOURCES.items()}


def test_every_module_has_a_layer():
    unplaced = [name for name in SOURCES if _layer(name) is None]
    assert not unplaced, f"add these modules to LAYERS in {Path(__file__).name}: {unplaced}"


def test_the_engine_never_imports_the_appliance():
    offenders = [f"{SOURCES[name].relative_to(ROOT)}:{line} imports {target}"
                 for name, imports in IMPORTS.items() if name.startswith("engine")
                 for target, line, _ in imports if target.split(".")[0] == "frame"]
    assert not offenders, offenders


def test_only_the_command_line_imports_the_command_line():
    offenders = [f"{SOURCES[name].relative_to(ROOT)}:{line} imports {target}"
                 for name, imports in IMPORTS.items() if not name.startswith("frame.cli")
                 for target, line, _ in imports if target == "frame.cli" or target.startswith("frame.cli.")]
    assert not offenders, offenders


def test_no_module_imports_a_higher_layer():
    offenders = []
    for name, imports in IMPORTS.items():
        own = _layer(name)
        for target, line, _ in imports:
            theirs = _layer(target)
            if own is not None and theirs is not None and theirs > own:
                offenders.append(f"{SOURCES[name].relative_to(ROOT)}:{line} ({LAYERS[own][0]}) imports "
                                 f"{target} ({LAYERS[theirs][0]})")
    assert not offenders, "\n".join(offenders)


def test_module_level_imports_have_no_cycles():
    # A package's __init__ importing its own submodules is how a package re-exports, not a cycle.
    graph = {name: {target for target, _, top in imports if top and target != name
                    and not (target.startswith(name + ".") and SOURCES[name].name == "__init__.py")}
             for name, imports in IMPORTS.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


@pytest.mark.parametrize("source, target", [("engine/ops.py", "frame.paths"), ("frame/display/base.py", "frame.cli")])
def test_the_checks_see_a_forbidden_import(source, target):
    """The scan itself works: a planted import of a higher layer is found, lazy or not."""
    name = _module_name(ROOT / source)
    planted = SOURCES[name].read_text() + f"\n\ndef _planted():\n    import {target}\n"
    imports = _imports(name, SOURCES[name], set(SOURCES), text=planted)
    assert (target, planted.count("\n"), False) in imports
    assert _layer(target) > _layer(name)
