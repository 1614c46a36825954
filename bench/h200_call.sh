#!/usr/bin/env bash
# The measurements the open issues (16-19) still need from the H200, as one `device` call. Build
# the release preset here, then bundle (the carry is limited to 64 MiB, so strip the programs):
#
#   rm -rf .device && ../shared/device/bundle .device build/release/bin/*
#   cp -L /lib/x86_64-linux-gnu/{libopenblas.so.0,libgfortran.so.5,libquadmath.so.0} .device/lib/
#   cp build/release/bin/kiln .device/bin/kiln_dbg   # (unstripped, for the backtrace)
#   strip .device/bin/kiln .device/bin/kiln_[a-ce-z]* .device/lib/*; rm .device/bin/kiln_bench
#   mkdir -p .device/peers && cp bench/peers/*.py bench/h200_call.sh .device/peers/
#
# and run `bash .device/peers/h200_call.sh` with carry [".device"]. On a freshly started machine
# the first block measures first calls on an empty store; keep it first.
cd "$(dirname "$0")/../.."
t() {
  local s
  s=$(date +%s%N)
  "$@"
  echo "[wall $((($(date +%s%N) - s) / 1000000)) ms, exit $?] $*"
}
date -u
echo "== issue 16: first calls on an empty store of a fresh machine (GPT-2 block, then kiln bench)"
export KILN_CACHE_DIR=$OUT/cache
t .device/run kiln_gpt2_block --runs 20
t .device/run kiln_gpt2_block --runs 20
t timeout 200 .device/run kiln bench --device cuda --runs 20
t timeout 100 .device/run kiln bench --device cuda --runs 20 --processes 1 --new-shape-side 4096
for i in 1 2 3; do KILN_CACHE_DIR=$(mktemp -d) t .device/run kiln_half_matmul --runs 2 1024 | tail -1; done
echo "== the exit crash of a process that opened the GPU (2026-12-05): a backtrace"
KILN_CACHE_DIR=$(mktemp -d) timeout 90 .device/run /usr/local/cuda/bin/cuda-gdb -q -batch \
  -ex run -ex bt -ex "thread apply all bt 12" --args .device/bin/kiln_dbg bench --device cuda \
  --runs 2 --processes 1 2>&1 | grep -v "^\[New Thread\|^\[Thread .* exited" | tail -60
echo "== tests"
t timeout 240 .device/run kiln_tests >"$OUT/tests.log" 2>&1
grep -E "^\[  FAILED|PASSED" "$OUT/tests.log" | tail -20
echo "== issues 18 and 19: op speed beside PyTorch"
t timeout 100 .device/run kiln_half_matmul --runs 20 4096 8192
t timeout 100 python3 .device/peers/torch_matmul.py cuda-half
t timeout 150 .device/run kiln_elementwise_ops
t timeout 150 python3 .device/peers/torch_elementwise_ops.py
t timeout 60 .device/run kiln_short_reductions --device cuda
t timeout 100 .device/run kiln_index_ops
t timeout 100 python3 .device/peers/torch_index_ops.py
t timeout 100 python3 .device/peers/torch_gpt2_block.py --compile
