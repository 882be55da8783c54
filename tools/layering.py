"""Measure the package's layering: import cycles between rooms, imports pointing up, private names
imported across modules, getattr capability probes, names on `run`, the largest files and functions.

Every import counts (lazy ones inside functions and those under TYPE_CHECKING): the file is parsed with
`ast` and every Import / ImportFrom node anywhere in it is read. A room is a top-level folder of
`steadyrl/` (or a top-level module, e.g. `cli`). The floors are those of docs/architecture.md.

    python tools/layering.py            # the numbers
    python tools/layering.py --edges    # and every import between rooms
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "steadyrl"

DOC = ROOT / "docs" / "architecture.md"


def floors(doc: Path = DOC) -> dict[str, int]:
    """Room -> floor (0 the lowest), read from the block between ``<!-- floors -->`` and
    ``<!-- /floors -->`` in docs/architecture.md: one floor a line, top first, the rooms first
    (separated by single spaces), then two or more spaces and what the floor holds."""
    text = doc.read_text()
    block = text.split("<!-- floors -->", 1)[1].split("<!-- /floors -->", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("```")]
    out = {}
    for height, line in enumerate(reversed(lines)):
        for room in re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split(" "):
            out[room] = height
    return out


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) for every import in the file, lazy and TYPE_CHECKING ones too."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, [a.name for a in node.names], node.lineno))
    return out


def resolve(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The package modules an import reaches: `from a.b import c` is a.b.c where that is a module."""
    if not target.startswith("steadyrl"):
        return []
    hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
    return hits or [target]


def edges() -> list[tuple[str, str, str, int]]:
    """(from module, to module, from room -> to room, line) for every import between two rooms."""
    known = modules()
    out = []
    for module, path in known.items():
        for target, names, line in imports_of(module, path):
            for dest in resolve(target, names, known):
                if room_of(dest) != room_of(module) and dest != "steadyrl":
                    out.append((module, dest, f"{room_of(module)} -> {room_of(dest)}", line))
    return out


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dest, _, _ in edges():
        graph[room_of(src)].add(room_of(dest))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules of its own room it imports (lazy and TYPE_CHECKING imports too)."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        for target, names, _ in imports_of(module, path):
            for dest in resolve(target, names, known):
                if dest in known and dest != module and room_of(dest) == room_of(module):
                    graph[module].add(dest)
    return graph


def up_imports() -> list[tuple[str, str, int]]:
    """Imports that do not point down: to a room on a higher floor, to another room on the same
    floor, or from or to a room without a floor (a new room must be given one)."""
    floor = floors()
    out = []
    for src, dest, _, line in edges():
        a, b = room_of(src), room_of(dest)
        if a not in floor or b not in floor or floor[b] >= floor[a]:
            out.append((src, dest, line))
    return out


def private_imports() -> list[tuple[str, str, int]]:
    """`from module import _name` between two modules (dunder names excluded)."""
    known = modules()
    out = []
    for module, path in known.items():
        for target, names, line in imports_of(module, path):
            if not target.startswith("steadyrl"):
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{target}.{n}" not in known:
                    out.append((module, f"{target}.{n}", line))
    return out


def getattr_probes() -> list[tuple[str, int, str]]:
    """getattr(x, "name", default) / hasattr(x, "name") on an agent, engine or driver."""
    out = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)):
                subject = ast.unparse(node.args[0])
                if any(w in subject.lower() for w in ("agent", "engine", "driver", "generator")):
                    out.append((module, node.lineno, ast.unparse(node)))
    return out


def run_names() -> tuple[int, int]:
    """``(fields, forwarded)`` of ``Run``: its annotated fields and properties, and the attributes
    of its parts installed on it with ``setattr`` (``run.policy`` for ``run.models.policy``)."""
    for path in PACKAGE.rglob("*.py"):
        src = path.read_text()
        tree = ast.parse(src)
        classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        if "Run" not in classes or "RunModels" not in classes:
            continue
        own = [s for s in classes["Run"].body if isinstance(s, ast.AnnAssign)
               or (isinstance(s, ast.FunctionDef) and any(ast.unparse(d) == "property" for d in s.decorator_list))]
        forwarded = 0
        if "setattr(Run" in src:
            forwarded = sum(isinstance(s, ast.AnnAssign) for part in ("RunModels", "RunTask", "RunOptim")
                            for s in classes[part].body)
        return len(own), forwarded
    return 0, 0


def largest(n: int = 5):
    files = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in PACKAGE.rglob("*.py")),
                   reverse=True)[:n]
    funcs = []
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{p.relative_to(ROOT)}:{node.name}"))
    return files, sorted(funcs, reverse=True)[:n]


def main(argv: list[str]) -> int:
    graph = room_graph()
    knots = cycles(graph)
    ups = up_imports()
    priv = private_imports()
    probes = getattr_probes()
    print(f"file-level cycles inside rooms: {len(cycles(module_graph()))}", *cycles(module_graph()))
    print(f"cycles between rooms: {len(knots)} " + "; ".join(", ".join(k) for k in knots))
    print(f"imports pointing up a floor: {len(ups)}")
    for src, dest, line in ups:
        print(f"  {src}:{line} -> {dest}")
    print(f"private names imported across modules: {len(priv)}")
    if "--edges" in argv:
        for src, name, line in priv:
            print(f"  {src}:{line} {name}")
    print(f"getattr/hasattr probes on agents/engines/drivers: {len(probes)}")
    for module, line, text in probes:
        print(f"  {module}:{line} {text}")
    own, forwarded = run_names()
    print(f"names on run: {own + forwarded} ({own} fields, {forwarded} forwarded with setattr)")
    files, funcs = largest()
    print("largest files: " + ", ".join(f"{p} {n}" for n, p in files))
    print("largest functions: " + ", ".join(f"{p} {n}" for n, p in funcs))
    if "--edges" in argv:
        for src, dest, rooms, line in sorted(edges(), key=lambda e: e[2]):
            print(f"  {rooms}: {src}:{line} -> {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
