"""What the notebooks' first cell costs a kernel, and what importing seaborn would add to it.

Each notebook's first code cell imports the toolkit's report modules. This runs each cell's imports in a fresh
Python (as a kernel would), alone and then followed by `import seaborn` (as the figures' modules did until they drew
with matplotlib alone, toolkit/reports/figure_style.py), alternating A B B A ... so the machine's drift falls on
both, and reports the CPU seconds of each (median over the rounds).

    .venv/bin/python benchmarks/kernel_imports.py --rounds 5

The last line: `kernel_imports: cells=<n> without=<median s> with_seaborn=<median s> seaborn=<median s a kernel>`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from toolkit.method.paired import alternating_order

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("prefill", "decode_matrix", "report", "rate_sweep", "compare")
TIMED = """
import time
start = time.process_time()
{imports}
{extra}
print(time.process_time() - start)
"""


def first_cell_imports(notebook: str) -> str:
    """The import lines of the notebook's first cell that imports the toolkit (magics left out)."""
    cells = json.loads((REPO / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "from toolkit" in source:
            lines = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
            return "\n".join(["import matplotlib_inline.backend_inline", *lines])
    raise SystemExit(f"error: {notebook}.ipynb has no cell importing the toolkit")


def cpu_seconds(imports: str, extra: str) -> float:
    """CPU seconds of `imports` then `extra` in a fresh Python."""
    code = TIMED.format(imports=imports, extra=extra)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    without: list[float] = []
    with_seaborn: list[float] = []
    for notebook in NOTEBOOKS:
        imports = first_cell_imports(notebook)
        cpu_seconds(imports, "")  # bytecode caches written before timing
        found: dict[str, list[float]] = {"A": [], "B": []}
        for _, side in alternating_order(args.rounds):
            found[side].append(cpu_seconds(imports, "import seaborn" if side == "B" else ""))
        a, b = statistics.median(found["A"]), statistics.median(found["B"])
        print(f"{notebook}: without {a:.2f} s, with seaborn {b:.2f} s of CPU")
        without.append(a)
        with_seaborn.append(b)
    a, b = statistics.median(without), statistics.median(with_seaborn)
    saved = statistics.median(y - x for x, y in zip(without, with_seaborn, strict=True))
    print(f"kernel_imports: cells={len(NOTEBOOKS)} without={a:.2f} with_seaborn={b:.2f} seaborn={saved:.2f}")


if __name__ == "__main__":
    main()
