#!/usr/bin/python3
"""The two `kiln bench` workloads in NumPy, timed the same way and printed in the same format.

Run with Debian's /usr/bin/python3 (python3-numpy). Each workload: perf_counter around the call,
the first call reported apart, then min and median of the next N (default 100). The result of a
call is dropped only after the clock has stopped, as kiln bench does.
"""

import argparse
import statistics
import sys
import time

import numpy as np


def blas_description():
    """What BLAS NumPy calls: the build config, and the library actually mapped into the process.

    Debian's NumPy is built against the generic libblas.so.3 and the alternatives system picks the
    implementation (OpenBLAS when libopenblas is installed), so the config alone says only "blas".
    """
    info = np.__config__.get_info("blas_opt_info") or {}
    configured = "+".join(dict.fromkeys(info.get("libraries", []))) or "unknown"
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        paths = set()
    libs = sorted(p for p in paths if "blas" in p.rsplit("/", 1)[-1])
    # The alternatives shim (libblas.so.3) says less than the implementation it pulls in.
    libs = [p for p in libs if not p.endswith("/libblas.so.3")] or libs
    loaded = ", ".join("/".join(p.split("/")[-2:]) for p in libs) or "unknown"
    return f"config {configured}, loaded {loaded}"


def fmt_duration(seconds):
    # The seed's rule, as kiln bench: ms with 2 decimals, us below one millisecond.
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f}us"
    return f"{seconds * 1e3:.2f}ms"


def measure(call, runs):
    def timed():
        t0 = time.perf_counter()
        result = call()
        t1 = time.perf_counter()
        return t1 - t0, result

    first, result = timed()
    del result
    samples = []
    for _ in range(runs):
        seconds, result = timed()
        del result  # freed outside the timing
        samples.append(seconds)
    return first, min(samples), statistics.median(samples)


def chain8(x):
    # Eight passes, as kiln's unfused chain: NumPy materialises every intermediate.
    y = np.abs(np.sin(x * np.float32(0.5) + np.float32(0.25)))
    return np.abs(np.sin(y * np.float32(0.5) + np.float32(0.25)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="timed calls after the first")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    rng = np.random.default_rng(1)
    x = rng.random((2048, 2048), dtype=np.float32)
    a = rng.random((1024, 1024), dtype=np.float32)
    b = rng.random((1024, 1024), dtype=np.float32)

    z = chain8(x)
    # The same check as kiln bench's, so that both sides are known to time the right work; a
    # float64 chain (a scalar promoting the dtype) would be twice the memory traffic.
    ref = np.abs(np.sin(np.abs(np.sin(x.astype(np.float64) * 0.5 + 0.25)) * 0.5 + 0.25))
    if z.dtype != np.float32 or not np.max(np.abs(z - ref)) <= 1e-5:
        sys.exit(f"numpy_compare: chain8 gives {z.dtype}, max error {np.max(np.abs(z - ref))}")

    print(f"name = numpy {np.__version__} ({blas_description()})", flush=True)
    workloads = [("chain8", x.shape, lambda: chain8(x)), ("matmul", a.shape, lambda: a @ b)]
    for name, shape, call in workloads:
        first, low, mid = measure(call, args.runs)
        print(f"{name} {shape[0]}x{shape[1]} f32: first {fmt_duration(first)}, next {args.runs} "
              f"min {fmt_duration(low)} median {fmt_duration(mid)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
