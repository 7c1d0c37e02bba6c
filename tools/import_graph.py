"""Print coreburst's import graph between its top-level parts: edges, cycles, upward arrows.

Run: ``python tools/import_graph.py`` (``make arch``). It reads the source with grimp (the
import-linter engine), so it shows the code as it is, not as docs/architecture.md describes it.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def contract_layers(pyproject: Path = ROOT / "pyproject.toml") -> list[list[str]]:
    """The layers contract of [tool.importlinter] in pyproject.toml, top first; names in one
    layer are siblings (``a | b``: they must not import each other)."""
    doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    for contract in doc["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            return [[n.strip() for n in re.split(r"[|:]", layer)] for layer in contract["layers"]]
    raise SystemExit(f"{pyproject}: [tool.importlinter] has no layers contract")


def part(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def import_cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one part (Tarjan): every set of parts
    where each reaches every other, so a loop of any length counts, not only a <-> b.

    >>> import_cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")})
    [['a', 'b', 'c']]
    """
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(edges):
        succ[a].append(b)
    nodes = sorted({n for edge in edges for n in edge})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        # Iterative depth-first search: (node, position in its successor list).
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # back in the caller: pass the low-link up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1, help="1: packages; 2: their modules")
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout to read (default: this one); e.g. a `git worktree` of an older commit, "
        "judged against this checkout's layer contract",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        parser.error(f"--root {root}: not a directory")
    sys.path.insert(0, str(root))
    packages = sorted(
        p.name
        for p in root.iterdir()
        if (p / "__init__.py").exists() and p.name not in {"tests", "tools", "benchmarks"}
    )
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges: dict[tuple[str, str], int] = defaultdict(int)
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            a, b = part(importer, args.depth), part(imported, args.depth)
            if a != b:
                edges[(a, b)] += 1
    print(f"packages: {', '.join(packages)}")
    print(f"edges ({len(edges)}), importer -> imported [import statements]:")
    for (a, b), n in sorted(edges.items()):
        print(f"  {a} -> {b} [{n}]")
    cycles = import_cycles(set(edges))
    print(f"cycles ({len(cycles)}), parts that import each other round a loop:")
    for members in cycles:
        print(f"  {' <-> '.join(members)}")
    layers = contract_layers()
    print(f"layer contract, top first: {' > '.join(' | '.join(layer) for layer in layers)}")
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    upward = [
        (a, b)
        for (a, b) in sorted(edges)
        if a.split(".")[0] in rank
        and b.split(".")[0] in rank
        and a.split(".")[0] != b.split(".")[0]
        and rank[b.split(".")[0]] <= rank[a.split(".")[0]]
    ]
    unplaced = sorted({p for p in packages if p not in rank})
    print(f"upward or sideways arrows against the layer contract ({len(upward)}):")
    for a, b in upward:
        print(f"  {a} -> {b}")
    if unplaced:
        print(f"packages outside the layer contract: {', '.join(unplaced)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
