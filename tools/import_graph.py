"""Print coreburst's import graph between its top-level parts: edges, cycles, upward arrows.

Run: ``python tools/import_graph.py`` (``make arch``). It reads the source with grimp (the
import-linter engine), so it shows the code as it is, not as the README describes it.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
# The layer contract, top first (README "Architecture"); names on one line are siblings that
# must not import each other.
DEFAULT_LAYERS = [
    ["coreburst"],
    ["sandbox"],
    ["infra"],
    ["guardrails", "policies", "onprem", "tco"],
    ["common"],
]


def part(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1, help="1: packages; 2: their modules")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    packages = sorted(
        p.name
        for p in ROOT.iterdir()
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
    cycles = sorted({tuple(sorted((a, b))) for (a, b) in edges if (b, a) in edges})
    print(f"cycles ({len(cycles)}):")
    for a, b in cycles:
        print(f"  {a} <-> {b}")
    rank = {name: i for i, layer in enumerate(DEFAULT_LAYERS) for name in layer}
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
