"""Benchmark: ``python -c "import georecall"`` (the front door loads its verbs on first use) against a bare
interpreter, and the first use of ``gr.check`` (which imports the checker). Prints the median of 11 fresh
interpreters each and which heavy modules ``import georecall`` left unimported (that property is also a test:
tests/test_api.py). Run by hand: python benchmarks/bench_import.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

__all__: list[str] = []

HEAVY = ("numpy", "scipy", "networkx", "sympy", "matplotlib", "torch", "transformers", "dask", "sphinx")


def median_seconds(code: str, runs: int = 11) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    bare = median_seconds("pass")
    light = median_seconds("import georecall")
    verbs = median_seconds("import georecall as gr; gr.check")
    print(f"python -c pass:                     {bare * 1000:7.1f} ms")
    print(f"import georecall:                   {light * 1000:7.1f} ms (+{(light - bare) * 1000:.1f} ms)")
    print(f"import georecall as gr; gr.check:   {verbs * 1000:7.1f} ms (the checker loads on call)")
    probe = f"import sys, georecall; print([m for m in {HEAVY!r} if m in sys.modules])"
    left = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    print(f"heavy modules imported by 'import georecall': {left.strip()}")
