"""Benchmark: exact enumeration at N=5, R=3, k=2 (1,728,000 tasks; target <= 5 s on 2 cores) and a bound table
over N up to 2^20, R <= 16, k <= 4 (target <= 3 s: d_min is decided exactly). Run by hand: python
benchmarks/bench_bounds.py
"""

from __future__ import annotations

import time

from georecall.bounds.counting import count_trees, enumerate_counts
from georecall.bounds.tables import bound_rows, gap_rows
from georecall.verify.checking.run import per_parameter_bits, table_bits

__all__: list[str] = []

if __name__ == "__main__":
    start = time.perf_counter()
    counts = enumerate_counts(5, 3, 2)
    print(f"enumeration N=5 R=3 k<=2: {counts.tasks:,} tasks, |F_2| = {counts.F[2]:,}, "
          f"|Trees_2| = {counts.trees[2]:,} in {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    rows = bound_rows([2**10, 2**12, 2**16, 2**20], [1, 2, 4, 8, 16], [1, 2, 3, 4], [1])
    print(f"bound table: {len(rows)} rows (N in 2^10..2^20, R in 1..16, k in 1..4) in "
          f"{time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    trees = count_trees(9, 2, 2)
    print(f"tree search N=9 R=2 k=2: |Trees_2| = {trees:,} in {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    rows = gap_rows([2**12, 2**20], [4, 16], [1, 2, 3], table_bits(), per_parameter_bits())
    print(f"gap table: {len(rows)} rows (exact d_min at b = 2 and b = 1) in "
          f"{time.perf_counter() - start:.2f} s")
