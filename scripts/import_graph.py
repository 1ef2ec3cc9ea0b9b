"""Print eagle_trt's package-level import graph and fail on a module cycle or an upward import.

    python scripts/import_graph.py [SRC_DIR]      # default: src/eagle_trt next to this script

Reads every module with `ast` (nothing is imported, so it runs without torch), counting imports inside functions
too. A "package" is a sub-package of eagle_trt (build, runtime, ...) or a top-level module (spec, tree, ...).
LAYERS lists them bottom first: a package may import only from packages in lower layers (or from itself). Exit
status 1 when a module-level import cycle or an import that points up or sideways exists, 0 otherwise.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = "eagle_trt"
LAYERS = [  # bottom first; docs/architecture.md §2, with the shared low modules spelled out
    ("errors",),
    (ROOT, "fsutil", "tree", "checkpoints", "request_rules", "chat", "families", "hub", "metrics"),  # ROOT: version
    ("tree_config", "draft_layouts", "quantization", "datasets"),
    ("spec", "demo_model", "load_policy"),
    ("build_spec",),
    ("kernels",),
    ("runtime",),
    ("tuning",),
    ("model_repository",),
    ("engines",),
    ("serving", "client", "deploy"),
    ("perf",),
    ("build", "train"),
    ("commands",),
    ("cli",),
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_names(src: Path) -> dict[str, Path]:
    """{dotted module name: file} for every .py file under src (src is the eagle_trt package directory)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = (ROOT,) + path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The eagle_trt modules one file imports (`from pkg import submodule` counts as importing the submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == ROOT}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One module cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "src" / ROOT
    modules = module_names(src)
    graph = {name: {m for m in imports_of(path, modules) if m in modules and m != name}
             for name, path in modules.items()}
    packages: dict[str, set[str]] = defaultdict(set)
    problems = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            src_pkg, dst_pkg = package(name), package(target)
            if src_pkg == dst_pkg:
                continue
            packages[src_pkg].add(dst_pkg)
            if src_pkg not in LAYER_OF or dst_pkg not in LAYER_OF:
                problems.append(f"{name} -> {target}: package {src_pkg if src_pkg not in LAYER_OF else dst_pkg} "
                                "has no layer (add it to LAYERS in scripts/import_graph.py)")
            elif LAYER_OF[dst_pkg] >= LAYER_OF[src_pkg]:
                how = "sideways" if LAYER_OF[dst_pkg] == LAYER_OF[src_pkg] else "upward"
                problems.append(f"{name} -> {target}: {how} import ({src_pkg} is layer {LAYER_OF[src_pkg]}, "
                                f"{dst_pkg} is layer {LAYER_OF[dst_pkg]})")
    for layer in reversed(range(len(LAYERS))):
        for pkg in LAYERS[layer]:
            deps = sorted(packages.get(pkg, ()), key=lambda p: (-LAYER_OF.get(p, -1), p))
            print(f"{layer:2d} {pkg:17s} -> {', '.join(deps) if deps else '(nothing)'}")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("module cycle: " + " -> ".join(cycle))
    for problem in problems:
        print("ERROR", problem)
    print(f"{len(modules)} modules, {sum(map(len, graph.values()))} imports, "
          f"{'no cycle, no upward import' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
