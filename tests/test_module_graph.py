"""The module graph stays acyclic and documented (no server needed).

* Rust: no two modules of ``rust/src`` use each other, directly or around a loop, counting
  ``crate::`` and ``super::`` paths in code (not in comments). A folder module's own
  children may use their parent (``decoder::held`` stores what ``decoder`` resolved):
  they are private to it, so the loop never leaves the folder.
* Python: the top-level imports of ``python/pgwire_cdc`` form no loop (imports made
  inside functions run after every module is loaded and are not counted).
* docs/development.md lists exactly these graphs: each table row names the modules its
  module uses (Rust, by top-level module) or imports (Python, at the top and inside
  functions).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUST = ROOT / "rust" / "src"
PYTHON = ROOT / "python" / "pgwire_cdc"


def _rust_module(path: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(RUST).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def _rust_graph() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    modules = {_rust_module(p): p for p in RUST.rglob("*.rs")}
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in modules}
    for module, path in modules.items():
        # `super::` from `a/b.rs` and from `a/b/mod.rs` alike names `a`.
        parent = module[:-1]
        for line in path.read_text().splitlines():
            code = line.split("//", 1)[0]
            for prefix, rest in re.findall(r"\b(crate|super)::((?:\w+::)*\w+)", code):
                base = () if prefix == "crate" else parent
                target = _longest_module(base + tuple(rest.split("::")), modules)
                if target is not None and target != module:
                    graph[module].add(target)
    return graph


def _longest_module(
    path: tuple[str, ...], modules: Iterable[tuple[str, ...]]
) -> tuple[str, ...] | None:
    known = set(modules)
    for end in range(len(path), 0, -1):
        if path[:end] in known:
            return path[:end]
    return None


def _within_own_folder(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One of the two is the other's ancestor: a folder module and its private children."""
    shorter, longer = sorted((a, b), key=len)
    return longer[: len(shorter)] == shorter


def _cycles(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[str]]:
    """Every edge that closes a loop, as the loop's path (depth-first search)."""
    found: list[list[str]] = []
    state: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []

    def visit(node: tuple[str, ...]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loop = [*stack[stack.index(nxt) :], nxt]
                if not all(_within_own_folder(x, y) for x, y in itertools.pairwise(loop)):
                    found.append(["::".join(m) or "crate" for m in loop])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_rust_modules_form_no_loop() -> None:
    graph = _rust_graph()
    assert ("decoder", "held") in graph and ("pg", "connect") in graph
    assert _cycles(graph) == []


def test_the_loop_finder_finds_loops() -> None:
    a, b, c = ("a",), ("b",), ("c",)
    assert _cycles({a: {b}, b: {c}, c: {a}}) == [["a", "b", "c", "a"]]
    assert _cycles({("d",): {("d", "e")}, ("d", "e"): {("d",)}}) == []


def _python_graph() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for path in PYTHON.glob("*.py"):
        name = path.stem
        edges: set[tuple[str, ...]] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    edges.add((node.module.split(".")[0],))
                else:
                    edges.update((alias.name,) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pgwire_cdc."):
                edges.add(((node.module or "").split(".")[1],))
        graph[(name,)] = edges - {(name,)}
    return graph


def test_python_top_level_imports_form_no_loop() -> None:
    graph = _python_graph()
    assert ("streaming",) in graph[("__init__",)]
    assert _cycles(graph) == []


# -- the graph as docs/development.md lists it ------------------------------------------

DEVELOPMENT = ROOT / "docs" / "development.md"


def _documented(heading: str) -> dict[str, list[set[str]]]:
    """The rows of the table under ``heading``: module -> its dependency columns."""
    text = DEVELOPMENT.read_text().split(heading, 1)[1].split("\n### ", 1)[0]
    rows: dict[str, list[set[str]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        rows[cells[0].strip("`")] = [set(re.findall(r"`(\w+)`", c)) for c in cells[2:]]
    return rows


def _function_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node not in tree.body:
            found.update(
                [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            )
    return found


def test_the_development_doc_lists_the_rust_graph() -> None:
    used: dict[str, set[str]] = {}
    for module, edges in _rust_graph().items():
        if module:
            used.setdefault(module[0], set()).update(e[0] for e in edges if e and e[0] != module[0])
    documented = {name: columns[0] for name, columns in _documented("### Rust").items()}
    assert documented == used


def test_the_development_doc_lists_the_python_graph() -> None:
    graph = _python_graph()
    actual = {}
    for path in PYTHON.glob("*.py"):
        top = {m[0] for m in graph[(path.stem,)]}
        actual[path.stem] = [top, _function_imports(path) - top - {path.stem}]
    actual["_native"] = [set(), set()]
    assert _documented("### Python") == actual
