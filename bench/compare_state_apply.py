"""Side by side: one window applied to a current-state table by a previous tree and by this one, alternating in one
run: bench_state's seed and one window of 1,000 changes per table size, each in a process of its own (its apply time,
its peak resident memory above the one before the apply, bytes written and the table's bytes), each tree with its own
seed writer. Each tree runs with itself as PYTHONPATH.

    python -m bench.compare_state_apply --previous /path/to/previous/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence

COMMAND = "python -m bench.compare_state_apply"
RUN = """
import json, tempfile
from bench.bench_state import _run, scenario_seed, scenario_apply
with tempfile.TemporaryDirectory() as root:
    _run(scenario_seed, root, {size})
    print(json.dumps(_run(scenario_apply, root, {size}, {changes})))
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previous", required=True, help="a checkout of the previous code")
    parser.add_argument("--sizes", default="100000,1000000", help="table sizes in rows (default: 100000,1000000)")
    parser.add_argument("--changes", type=int, default=1000, help="changes in the window (default: 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    args = parser.parse_args(argv)
    trees = {"previous": os.path.abspath(args.previous), "this": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    for n in range(args.rounds):
        for size in (int(s) for s in args.sizes.split(",")):
            for name, tree in trees.items():
                code = RUN.format(size=size, changes=args.changes)
                env = {**os.environ, "PYTHONPATH": tree}
                done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"round {n} {name:>8} {size:>9} rows: apply {r['seconds']:.2f} s, peak {r['peak_mb']:.0f} MB "
                      f"(+{r['peak_mb'] - r['before_mb']:.0f} over the process before the apply), written {r['written']:,} B "
                      f"of a table of {r['table']:,} B", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
