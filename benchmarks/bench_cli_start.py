"""Benchmark: the start-up time of ``georecall --help`` (issue 42: "georecall --help stays as fast as it is").

Runs ``python -c "from georecall.cli import main; main(['--help'])"`` (what the console script runs)
``--repeats`` times in fresh processes and prints the median wall time, with the heavy libraries the start-up
imported (scipy, networkx, sympy, matplotlib, torch) and how many georecall modules it loaded. A timing, not a
test: run it by hand, before and after a change to the imports, on the same machine.

Run by hand:
    python benchmarks/bench_cli_start.py              # median of 5
    python benchmarks/bench_cli_start.py --repeats 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = """
import contextlib, io, json, sys
from georecall.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["--help"])
    except SystemExit:
        pass
heavy = sorted(m for m in ("scipy", "networkx", "sympy", "matplotlib", "torch") if m in sys.modules)
own = sum(m.startswith("georecall") for m in sys.modules)
print(json.dumps({"heavy": heavy, "georecall_modules": own}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    times, report = [], {}
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
        report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"georecall --help: median {statistics.median(times):.3f} s over {args.repeats} runs "
          f"(min {min(times):.3f} s); heavy libraries imported: {report['heavy'] or 'none'}; "
          f"georecall modules loaded: {report['georecall_modules']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
