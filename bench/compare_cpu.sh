#!/usr/bin/env bash
# kiln against NumPy on the CPU, in one run: `bench/compare_cpu.sh [runs]` (default 100).
#
# Runs `kiln bench --device cpu` and bench/numpy_compare.py interleaved, kiln, numpy, kiln, numpy,
# so that a machine that gets slower or faster during the run (turbo, a neighbour) weighs on both
# sides alike; then prints kiln's speed relative to NumPy from the min lines, beside the issue's
# targets: chain8 (eight unfused passes) at least 3x NumPy's speed, matmul at least 0.9x.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-100}

bash "$root/scripts/setup.sh" release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for round in 1 2; do
  echo "--- round $round: kiln"
  "$root/build/release/bin/kiln" bench --device cpu --runs "$runs" | tee "$out/kiln.$round"
  echo "--- round $round: numpy"
  /usr/bin/python3 "$root/bench/numpy_compare.py" --runs "$runs" | tee "$out/numpy.$round"
done

/usr/bin/python3 - "$out" <<'PY'
import re
import sys

LINE = re.compile(r"^(\w+) \d+x\d+ f32: first [\d.]+(?:ms|us), next \d+ "
                  r"min ([\d.]+)(ms|us) median [\d.]+(?:ms|us)$")
TARGET = {"chain8": 3.0, "matmul": 0.9}


def mins(path):
    """{workload: min seconds} from one run's output lines."""
    found = {}
    for line in open(path, encoding="utf-8"):
        m = LINE.match(line.strip())
        if m:
            found[m[1]] = float(m[2]) * (1e-3 if m[3] == "ms" else 1e-6)
    return found


def fmt(seconds):
    return f"{seconds * 1e6:.2f}us" if seconds < 1e-3 else f"{seconds * 1e3:.2f}ms"


out = sys.argv[1]
rounds = [(mins(f"{out}/kiln.{r}"), mins(f"{out}/numpy.{r}")) for r in (1, 2)]
print("\nkiln speed vs numpy on the CPU = numpy min / kiln min (higher favours kiln)")
print(f"{'workload':<9} {'round':<6} {'kiln min':>10} {'numpy min':>10} {'speed':>7}  target")
for name, target in TARGET.items():
    rows = [(str(r), k[name], n[name]) for r, (k, n) in enumerate(rounds, 1)]
    rows.append(("best", min(k[name] for k, _ in rounds), min(n[name] for _, n in rounds)))
    for label, k, n in rows:
        verdict = "met" if n / k >= target else "MISSED"
        print(f"{name:<9} {label:<6} {fmt(k):>10} {fmt(n):>10} {n / k:>6.2f}x  "
              f">= {target}x {verdict}")
PY
