#!/usr/bin/env bash
# The measurements the open issues still need from the H200, as `device` calls. Build the release
# preset here, then bundle and compress (the carry is limited to 64 MiB):
#
#   rm -rf .device && ../shared/device/bundle .device build/release/bin/*
#   cp -L /lib/x86_64-linux-gnu/{libopenblas.so.0,libgfortran.so.5,libquadmath.so.0} .device/lib/
#   cp build/release/bin/kiln .device/bin/kiln_dbg   # (unstripped, for the backtrace)
#   strip .device/bin/kiln .device/bin/kiln_[a-ce-z]* .device/lib/*; rm .device/bin/kiln_bench
#   mkdir -p .device/peers && cp bench/peers/*.py bench/h200_call.sh .device/peers/
#   tar -cJf .device.tar.xz .device
#
# (optionally a `kiln` built from an older commit as .device/bin/kiln_before, for before/after),
# and run `tar xJf .device.tar.xz && bash .device/peers/h200_call.sh SECTION...` with carry
# [".device.tar.xz"]. Sections: first (first calls on an empty store: keep it first on a freshly
# started machine), bench (kiln bench, and kiln_before's beside it when bundled), fuzz (the
# 2000-program CUDA gradient fuzz alone), gdb
# (backtraces of CLI children that opened the GPU), tests, ops (op speed beside PyTorch), train
# (the MLP step beside PyTorch), linear (the linear layer's epilogues beside PyTorch), attn (a change to the attention kernels: their tests,
# sanitizers and speed), attention (the fused kernel beside
# PyTorch's SDPA), elementwise (the element-wise math's tests and speed), ce (the fused cross-entropy beside F.cross_entropy), half (half matmul and
# element-wise ops), race (racecheck on attention), profile (device time per kernel of
# a GPT-2 step, and torch.compile's), cpu (kiln bench on the host), gpt2 (GPT-2 small training steps beside PyTorch), benchtrain (kiln
# bench --train), gpt2bf16 (the bf16 step beside eager's), shards (the suite without the CLI
# tests), parity (GPT-2 losses against PyTorch's), example (examples/gpt on CUDA), quick (the
# changed tests and one bench round, for a short budget), tunelog (a GPT-2 step's matmul choices
# on an empty store), tuneahead (the step on a store kiln tune --exhaustive filled), exitcrash
# (where `kiln tune` dies at exit), dist (issue 22's tests on this machine's GPUs), disttests
# (only its tests), harness (a bundled kernel harness), ncuattn (Nsight Compute on the attention
# kernels and PyTorch's flash ones), addnorm (add_layer_norm's tests, speed and the GPT-2 step),
# exitattn (kiln_attention_ops three times, for a crash at exit), rowops (row ops and
# cross-entropy beside PyTorch's), changed (the row, norm, attention and GPT-2 tests alone), cudnn
# (cuDNN's attention: tests, memcheck, speed on and off beside PyTorch's SDPA and torch.compile),
# block (the GPT-2 block forward with issue 19's ops beside torch.compile).
cd "$(dirname "$0")/../.."
t() {
  local s
  s=$(date +%s%N)
  "$@"
  echo "[wall $((($(date +%s%N) - s) / 1000000)) ms, exit $?] $*"
}
# The suite but the CLI tests, as four shards at once (it runs serially for over 5 minutes on one
# process); `wait` also waits for a fuzz started beside it.
shards() {
  for i in 0 1 2 3; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 220 .device/run kiln_tests \
      --gtest_filter='-Cli*' >"$OUT/tests_$i.log" 2>&1 &
  done
  t wait
  grep -hE "^\[  FAILED|PASSED|tests ran" "$OUT"/tests_*.log | tail -24
}
# Issue 22's tests on this machine's GPUs: the collectives and DataParallel in a group of one,
# NCCL's loading, and the jobs over every GPU (kiln launch; the watchdog test needs two).
dist_tests() {
  t timeout 200 .device/run kiln_tests \
    --gtest_filter='*Collectives*:*DataParallel*:Nccl*:GpuJob*:DistJob*:*SetGrad*' \
    >"$OUT/dist_tests.log" 2>&1
  grep -hE "^\[  FAILED|^\[  SKIPPED|PASSED|tests ran" "$OUT/dist_tests.log" | tail -12
  grep -hE "Failure|rank [0-9]" "$OUT/dist_tests.log" | head -20
}
# The tests of the row kernels, norms, attention and GPT-2 alone (a short call's).
changed_tests() {
  t timeout 150 .device/run kiln_tests \
    --gtest_filter='*AddNorm*:*NormTest*:CudaNormBackward*:*BackendRows*:*Gpt2*:*Attention*:*Rows*' \
    >"$OUT/changed_tests.log" 2>&1
  grep -E "^\[  FAILED|PASSED|Failure" "$OUT/changed_tests.log" | head -20
}
# The tests that match $2 (their summary), then memcheck on those that match $3; the logs are
# $OUT/$1_tests.log and $OUT/$1_memcheck.log.
tests_and_memcheck() {
  t timeout 150 .device/run kiln_tests --gtest_filter="$2" >"$OUT/$1_tests.log" 2>&1
  grep -E "^\[  FAILED|PASSED|SKIPPED|Failure" "$OUT/$1_tests.log" | head -20
  t timeout 120 .device/run compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 1 .device/bin/kiln_tests --gtest_filter="$3" >"$OUT/$1_memcheck.log" 2>&1
  grep -E "Invalid|ERROR SUMMARY|at 0x|by thread" "$OUT/$1_memcheck.log" | head -12
}
# NCCL for kiln::dist, which loads it at run time: the toolkit's, else PyTorch's wheel's.
if [ -z "${KILN_NCCL_LIBRARY:-}" ]; then
  for f in /usr/local/cuda/lib64/libnccl.so.2 $(python3 -c 'import nvidia.nccl, os
print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null); do
    if [ -e "$f" ]; then
      export KILN_NCCL_LIBRARY=$f
      break
    fi
  done
fi
# cuDNN for bf16/f16 attention, which kiln loads at run time: the toolkit's, else PyTorch's wheel's
# (whose libcudnn.so.9 opens its engine libraries beside it through the loader path).
if [ -z "${KILN_CUDNN_LIBRARY:-}" ]; then
  for f in /usr/local/cuda/lib64/libcudnn.so.9 /usr/local/cuda/lib/libcudnn.so.9 \
    $(python3 -c 'import nvidia.cudnn, os
print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null); do
    if [ -e "$f" ]; then
      export KILN_CUDNN_LIBRARY=$f
      export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi
echo "cuDNN: ${KILN_CUDNN_LIBRARY:-not found}"
# NVLink multicast must stay off on the lent machines (one H100 had the variable unset,
# 2026-12-07): set it here for every rank and peer this script starts.
echo "NCCL: ${KILN_NCCL_LIBRARY:-not found} (NCCL_NVLS_ENABLE was ${NCCL_NVLS_ENABLE:-unset})"
export NCCL_NVLS_ENABLE=0
# A process that crashes anywhere in this call leaves a core in $OUT (where the kernel lets this
# script say so), read at the end by cuda-gdb for every thread's stack: the rare exit crash
# (docs/benchmarks.md, 2026-12-07) never showed itself under a debugger.
ulimit -c unlimited 2>/dev/null
if echo "$OUT/core.%e.%p" >/proc/sys/kernel/core_pattern 2>/dev/null; then
  echo "core dumps: on, into \$OUT"
else
  echo "core dumps: core_pattern not writable ($(cat /proc/sys/kernel/core_pattern 2>/dev/null))"
fi
read_cores() {
  for core in "$OUT"/core.*; do
    [ -e "$core" ] || continue
    # (%e is the first 15 characters of the program's name: the bundled program they begin.)
    exe=$(basename "$core" | cut -d. -f2)
    exe=$(cd .device/bin && ls -d "$exe"* 2>/dev/null | head -1)
    echo "== core $core ($exe)"
    timeout 120 .device/run /usr/local/cuda/bin/cuda-gdb -q -batch -ex bt -ex "thread apply all bt 20" \
      ".device/bin/$exe" "$core" 2>&1 | grep -vE "^\[New LWP|^$" | head -150 >"$core.txt"
    head -60 "$core.txt"
    rm -f "$core"
  done
}
trap read_cores EXIT
date -u
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for section in "$@"; do
  echo "== $section"
  case $section in
  first)
    export KILN_CACHE_DIR=$OUT/cache
    KILN_LOG=tune,fusion:summary t .device/run kiln_gpt2_block --runs 20 2>"$OUT/first_log.txt"
    grep -iE "compile|kernel|tune" "$OUT/first_log.txt" | tail -25
    t .device/run kiln_gpt2_block --runs 20
    t timeout 100 .device/run kiln bench --device cuda --runs 20 --processes 1 --new-shape-side 4096
    for i in 1 2 3; do KILN_CACHE_DIR=$(mktemp -d) t .device/run kiln_half_matmul --runs 2 1024 | tail -1; done
    unset KILN_CACHE_DIR
    ;;
  bench)
    for b in kiln kiln_before; do
      [ -x .device/bin/$b ] || continue
      export KILN_CACHE_DIR=$OUT/cache_$b
      t timeout 120 .device/run $b bench --device cuda --runs 20 >/dev/null 2>&1  # fills its store
    done
    for round in 1 2; do
      for b in kiln_before kiln; do
        [ -x .device/bin/$b ] || continue
        export KILN_CACHE_DIR=$OUT/cache_$b
        echo "-- $b, round $round"
        t timeout 120 .device/run $b bench --device cuda --runs 200 2>&1 | tee -a "$OUT/bench_$b.txt"
      done
    done
    unset KILN_CACHE_DIR
    ;;
  gdb)
    # CLI children that opened the GPU die of SIGSEGV at exit (kiln doctor, kiln bench --device
    # cpu, kiln tune; 2026-12-05): where, with every thread's stack.
    g=$(command -v gdb || echo /usr/local/cuda/bin/cuda-gdb)
    for b in kiln_dbg kiln_dbg2; do
      [ -x .device/bin/$b ] || continue
      for args in "doctor" "bench --device cpu --runs 1 --processes 1"; do
        echo "-- gdb $b $args"
        # shellcheck disable=SC2086
        KILN_CACHE_DIR=$(mktemp -d) timeout 90 .device/run "$g" -q -batch -ex run -ex bt \
          -ex "thread apply all bt 30" --args .device/bin/$b $args 2>&1 |
          grep -v "^\[New Thread\|^\[Thread .* exited" | tail -100 >"$OUT/gdb_${b}_${args%% *}.txt"
        grep -E "SIGSEGV|exited" "$OUT/gdb_${b}_${args%% *}.txt"
      done
    done
    # kiln_attention_ops died of SIGSEGV in the composed f32 D=128 forward + backward (H100,
    # 2026-12-06): where (bundle an unstripped build as .device/bin/kiln_attention_ops_dbg).
    if [ -x .device/bin/kiln_attention_ops_dbg ]; then
      timeout 150 .device/run "$g" -q -batch -ex run -ex bt \
        -ex "thread apply all bt 30" --args .device/bin/kiln_attention_ops_dbg 2>&1 |
        grep -v "^\[New Thread\|^\[Thread .* exited" | tail -120 >"$OUT/gdb_attention_ops.txt"
      grep -E -A30 "SIGSEGV" "$OUT/gdb_attention_ops.txt" | head -40
    fi
    ;;
  tests)
    # The shards, then the CLI tests apart: a `kiln tune` child that hangs on the GPU (2 shards,
    # 07:32 2026-12-06) must not take a shard's other tests with it.
    shards
    if [ -n "${FUZZ_BESIDE:-}" ]; then
      grep -hE "OK \]|FAILED|Failure|evaluates|program seed" "$OUT"/gradfuzz_*.log | head -20
    fi
    t timeout 120 .device/run kiln_tests --gtest_filter='Cli*' >"$OUT/tests_cli.log" 2>&1
    grep -hE "^\[  FAILED|PASSED|tests ran" "$OUT/tests_cli.log" | tail -8
    tail -3 "$OUT/tests_cli.log"
    # The attention and norm-backward kernels under compute-sanitizer (out-of-bounds and
    # misaligned accesses). (--report-api-errors no: kiln's tests provoke API errors on purpose,
    # and kiln falls back where CUDA refuses a graph capture; the full report is kept in $OUT.)
    t timeout 90 .device/run compute-sanitizer --tool memcheck --report-api-errors no \
      --error-exitcode 1 .device/bin/kiln_tests --gtest_filter='CudaAttention*:CudaNormBackward*' \
      >"$OUT/memcheck.log" 2>&1
    grep -E "Invalid|ERROR SUMMARY|at 0x|by thread" "$OUT/memcheck.log" | head -12
    ;;
  fuzz)
    # The CUDA gradient fuzz over 2000 programs: eight processes of 250 programs from
    # consecutive seeds at once (each compiles its kernels on its own thread; one process took
    # longer than 220 s for the 2000). With FUZZ_BESIDE set, started in the background for the
    # next section (tests) to run beside it and wait for it.
    for i in 0 1 2 3 4 5 6 7; do
      KILN_FUZZ_SEED=$((20261206000 + 250 * i)) KILN_GRAD_FUZZ_PROGRAMS=250 timeout 300 \
        .device/run kiln_tests --gtest_filter='*GradFuzz*cuda*' >"$OUT/gradfuzz_$i.log" 2>&1 &
    done
    if [ -z "${FUZZ_BESIDE:-}" ]; then
      t wait
      grep -hE "OK \]|FAILED|Failure|evaluates|program seed" "$OUT"/gradfuzz_*.log | head -20
    fi
    ;;
  ops)
    t timeout 100 .device/run kiln_half_matmul --runs 20 4096 8192
    t timeout 100 python3 .device/peers/torch_matmul.py cuda-half
    t timeout 150 .device/run kiln_elementwise_ops
    t timeout 150 python3 .device/peers/torch_elementwise_ops.py
    t timeout 60 .device/run kiln_short_reductions --device cuda
    t timeout 100 .device/run kiln_index_ops
    t timeout 100 python3 .device/peers/torch_index_ops.py
    t timeout 100 .device/run kiln_row_ops
    t timeout 300 python3 .device/peers/torch_row_ops.py
    t timeout 150 .device/run kiln_order_ops
    t timeout 150 python3 .device/peers/torch_order_ops.py
    ;;
  linear)
    # Issue 19: the linear layer's cuBLASLt epilogues beside the plain product, the composed ops
    # and PyTorch.
    t timeout 120 .device/run kiln_linear_ops
    t timeout 200 python3 .device/peers/torch_linear.py
    ;;
  attention)
    # Issue 19: the fused attention kernel beside the composed form and PyTorch's SDPA (and, after
    # them, the GPT-2 step with the kernels: kiln bench --train).
    t timeout 90 .device/run kiln_attention_ops
    t timeout 90 python3 .device/peers/torch_attention.py
    t timeout 150 .device/run kiln bench --train --device cuda --runs 10
    ;;
  block)
    # Issue 19: the GPT-2 block forward with the new ops (nn::GPT2Block: layer_norm, the fused
    # attention, linear with epilogues), TF32 and bf16 autocast, beside PyTorch eager and
    # torch.compile with SDPA; the block written with basic ops last.
    t timeout 60 .device/run kiln_gpt2_block --ops module --runs 20
    t timeout 60 .device/run kiln_gpt2_block --ops module --autocast bf16 --runs 20
    t timeout 60 .device/run kiln_gpt2_block --runs 20
    for args in "--flash" "--flash --compile" "--flash --autocast bf16" \
      "--flash --compile --autocast bf16"; do
      # shellcheck disable=SC2086
      t timeout 150 python3 .device/peers/torch_gpt2_block.py $args
    done
    ;;
  cudnn)
    # cuDNN's attention: the attention tests (kiln's kernels and cuDNN's) with memcheck, the op
    # beside PyTorch's SDPA, and the bf16 GPT-2 step with cuDNN on and off beside torch.compile.
    tests_and_memcheck cudnn '*Attention*:*Gpt2*:CliTest.Doctor*' 'CudaAttention.Cudnn*'
    t timeout 30 .device/run kiln info | grep -iE "cudnn|gpu"
    t timeout 90 .device/run kiln_attention_ops
    KILN_CUDNN=0 t timeout 90 .device/run kiln_attention_ops
    t timeout 90 python3 .device/peers/torch_attention.py
    # (twice: the second process's first step reads cuDNN's plans from the store)
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    KILN_CUDNN=0 t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16 --compile
    ;;
  attn)
    # A change to the attention kernels, in one short call: their tests and both sanitizers,
    # then their speed beside PyTorch's SDPA and the GPT-2 step with them.
    tests_and_memcheck attn '*Attention*:CudaMemory*' 'CudaAttention*'
    t timeout 60 .device/run compute-sanitizer --tool racecheck --error-exitcode 1 \
      .device/bin/kiln_tests --gtest_filter='CudaAttention*' 2>&1 | tail -3
    t timeout 90 .device/run kiln_attention_ops
    t timeout 90 python3 .device/peers/torch_attention.py
    t timeout 150 .device/run kiln bench --train --device cuda --runs 10
    ;;
  half)
    # Issue 18: half matmul and every element-wise op beside PyTorch (the first rows of ops).
    t timeout 100 .device/run kiln_half_matmul --runs 20 4096 8192
    t timeout 100 python3 .device/peers/torch_matmul.py cuda-half
    t timeout 150 .device/run kiln_elementwise_ops
    t timeout 150 python3 .device/peers/torch_elementwise_ops.py
    ;;
  elementwise)
    # A change to the element-wise math: the half forms over every half input, the element-wise
    # conformance on CUDA, and every op's speed beside PyTorch's.
    t timeout 120 .device/run kiln_tests \
      --gtest_filter='HalfFunctions.*:*Elementwise*cuda*:CudaRandom*' 2>&1 | grep -E "measured|FAILED|PASSED" | tail -20
    t timeout 150 .device/run kiln_elementwise_ops
    t timeout 150 python3 .device/peers/torch_elementwise_ops.py
    ;;
  profile)
    # Where a GPT-2 step's device time goes (KILN_LOG=profile: device time per kernel at exit).
    KILN_LOG=profile t timeout 120 .device/run kiln_gpt2_train \
      --device cuda --steps 3 --autocast bf16 >"$OUT/profile_gpt2_bf16.txt" 2>&1
    grep -A45 "kiln\[profile\]" "$OUT/profile_gpt2_bf16.txt"
    # torch.compile's, beside it (torch.profiler, 3 steps after the timed ones).
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 3 --dtype bf16 --compile \
      --profile >"$OUT/profile_torch_compile.txt" 2>&1
    tail -52 "$OUT/profile_torch_compile.txt"
    ;;
  race)
    # racecheck on the attention kernels (shared-memory tiles), apart: last when time is short.
    t timeout 45 .device/run compute-sanitizer --tool racecheck \
      --error-exitcode 1 .device/bin/kiln_tests --gtest_filter='CudaAttention*' 2>&1 | tail -4
    ;;
  ce)
    # Issue 19: the fused cross-entropy beside the composed form and F.cross_entropy.
    t timeout 60 .device/run kiln_cross_entropy
    t timeout 90 python3 .device/peers/torch_cross_entropy.py
    ;;
  cpu)
    # Issue 16: the CPU BLAS as installed on the GPU machine's host.
    t timeout 120 .device/run kiln bench --device cpu --runs 50 --processes 1
    ;;
  quick)
    # What changed since the last full run, when device time is short: autodiff (recipes, the
    # fuzzer), random normals, the tests that died at exit, then one round of kiln bench.
    t timeout 200 .device/run kiln_tests --gtest_filter='*Autograd*:*GradFuzz*:*Random*:*Cli*:*Loss*:*Rows*:*Norm*' \
      >"$OUT/tests.log" 2>&1
    grep -E "^\[  FAILED|PASSED|tests ran" "$OUT/tests.log" | tail -20
    t timeout 60 .device/run kiln_mlp_step --device cuda
    KILN_FUSION=0 t timeout 60 .device/run kiln_mlp_step --device cuda
    t timeout 60 python3 .device/peers/torch_mlp_step.py --device cuda --no-compile
    for b in kiln_before kiln; do
      KILN_CACHE_DIR=$OUT/cache_$b t timeout 60 .device/run $b bench --device cuda --runs 100
    done
    ;;
  train)
    t timeout 60 .device/run kiln_mlp_step --device cuda
    KILN_FUSION=0 t timeout 60 .device/run kiln_mlp_step --device cuda
    t timeout 200 python3 .device/peers/torch_mlp_step.py --device cuda
    ;;
  parity)
    # Issue 21: GPT-2 small from PyTorch-initialised weights, 10 steps in strict f32, losses
    # against PyTorch's within 1e-4.
    t timeout 120 python3 .device/peers/gpt2_parity.py "$OUT/parity" --steps 10 &&
      t timeout 120 .device/run kiln_gpt2_parity "$OUT/parity"
    rm -f "$OUT"/parity/*.safetensors
    ;;
  example)
    # examples/gpt on CUDA, CI's size (when a build of it is bundled as .device/bin/gpt, and the
    # text as .device/peers/GPL-3).
    [ -x .device/bin/gpt ] && t timeout 120 .device/run gpt --device cuda --steps 600 \
      --max-val-loss 2.5 --log-every 200 --text .device/peers/GPL-3
    ;;
  benchtrain)
    t timeout 200 .device/run kiln bench --train --device cuda --runs 10
    ;;
  gpt2)
    # GPT-2 small training steps (B=16, T=1024) beside PyTorch's, f32 with TF32 (kiln's
    # Precision::high) and PyTorch's bf16 autocast.
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    for args in "--dtype tf32" "--dtype tf32 --attention written" "--dtype bf16" \
      "--dtype bf16 --compile"; do
      # shellcheck disable=SC2086
      t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 $args
    done
    ;;
  addnorm)
    # add_layer_norm (the residual add in the norm's pass, forward and backward): its tests (with
    # the other row, norm, attention and GPT-2 tests) and memcheck, the op beside the add and the
    # norm apart and PyTorch's (GPT-2's [16384, 768]), and the bf16 GPT-2 step that uses it beside
    # PyTorch eager and torch.compile.
    changed_tests
    t timeout 90 .device/run compute-sanitizer --tool memcheck --report-api-errors no \
      --error-exitcode 1 .device/bin/kiln_tests \
      --gtest_filter='CudaNormBackward*:*AddNorm*cuda*' >"$OUT/addnorm_memcheck.log" 2>&1
    grep -E "Invalid|ERROR SUMMARY|at 0x|by thread" "$OUT/addnorm_memcheck.log" | head -12
    t timeout 60 .device/run kiln_row_ops --rows 16384 --cols 768
    t timeout 150 python3 .device/peers/torch_row_ops.py --rows 16384 --cols 768
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16 --compile
    ;;
  train21)
    # Issue 21's bf16 figures in one short call: kiln's step (the first on the store an earlier
    # section filled), `kiln bench --train`, and torch.compile's step.
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 200 .device/run kiln bench --train --device cuda --runs 10
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16 --compile
    ;;
  background)
    # The background compiles and the exit (nvrtc_compiler's exit handler), then the CLI tests.
    t timeout 150 .device/run kiln_tests \
      --gtest_filter='CudaBackgroundCompile*:CudaPrecompile*:CudaCompile*:Cli*' >"$OUT/background.log" 2>&1
    grep -E "^\[  FAILED|PASSED|SKIPPED|Failure" "$OUT/background.log" | head -20
    ;;
  gpt2bf16)
    # The bf16 step alone beside PyTorch eager's (a short call).
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16
    ;;
  shards)
    # The suite without the CLI tests and the sanitizer (a short call).
    shards
    ;;
  tunelog)
    # The matmul choices a GPT-2 bf16 step makes on an empty store, and how fully each was timed
    # (KILN_LOG=tune: "(partial)" where the first call's bound cut the candidates short), beside
    # each product's device time (KILN_LOG=profile).
    KILN_CACHE_DIR=$(mktemp -d) KILN_LOG=tune,profile t timeout 120 .device/run kiln_gpt2_train \
      --device cuda --steps 3 --autocast bf16 >"$OUT/tunelog.txt" 2>&1
    grep -E "candidates timed|: chose" "$OUT/tunelog.txt" | grep m16384 | cut -c1-230 | head -30
    grep -E "cublasLt" "$OUT/tunelog.txt" | head -16
    ;;
  dist)
    dist_tests
    # The GPT-2 bf16 step through DataParallel over every GPU, beside the step without it and
    # PyTorch's DDP (torchrun) on as many.
    n=$(nvidia-smi -L | wc -l)
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    t timeout 150 .device/run kiln launch -n "$n" "$PWD/.device/bin/kiln_gpt2_train" \
      --device cuda --steps 10 --autocast bf16 --ddp on
    t timeout 150 python3 .device/peers/gpt2_torch.py --steps 10 --dtype bf16
    t timeout 150 torchrun --nproc-per-node "$n" .device/peers/gpt2_torch.py --steps 10 \
      --dtype bf16 --ddp 2>&1 | grep -vE "^W[0-9]|OMP_NUM_THREADS|^\*+$"
    # all_reduce's bus bandwidth over every GPU, beside torch.distributed's (0 on one GPU).
    t timeout 100 .device/run kiln launch -n "$n" "$PWD/.device/bin/kiln_allreduce"
    t timeout 100 torchrun --nproc-per-node "$n" .device/peers/allreduce_torch.py 2>&1 |
      grep -vE "^W[0-9]|OMP_NUM_THREADS|^\*+$"
    ;;
  disttests)
    # The dist tests alone (on a freshly started machine: where the exit crash struck).
    dist_tests
    ;;
  harness)
    # Standalone harnesses (built with nvcc on the build machine, not part of kiln) bundled as
    # .device/bin/harness_*: each, when there is one.
    for h in .device/bin/harness_*; do
      [ -x "$h" ] && t timeout 90 .device/run "$(basename "$h")"
    done
    ;;
  ncuattn)
    # Nsight Compute's view of kiln's attention kernels (bf16, D = 64, causal, B = 16, H = 12,
    # T = 1024) beside PyTorch's flash kernels on the same shapes: where the time goes (issue
    # slots, stalls, pipes), each kernel's first launch.
    ncu_one() {
      local name=$1 filter=$2
      shift 2
      timeout 150 "$ncu" --clock-control none -k "regex:$filter" -c 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
        --section WarpStateStats --section SchedulerStats --section Occupancy \
        --section LaunchStats --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
        "$@" >"$OUT/ncu_$name.txt" 2>&1
      echo "-- $name ($filter)"
      grep -E "Duration|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Executed Instructions  |Compute \(SM\) Throughput|Stall|Bank" \
        "$OUT/ncu_$name.txt" | head -24
    }
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    echo "ncu: $ncu"
    for pass in fwd dq dkv; do
      ncu_one "kiln_$pass" "kiln_attention_${pass}_bf16_d64" .device/run kiln_attention_ops --runs 1 --batch 1
    done
    for k in flash_fwd flash_bwd_dq_dk_dv flash_bwd_dot_do_o flash_bwd_convert_dq; do
      ncu_one "torch_$k" "$k" python3 .device/peers/torch_attention.py --runs 1 --batch 1
    done
    ;;
  exitcrash)
    # `kiln tune --matmul` children died of SIGSEGV at exit in the CLI tests (H100, 2026-12-07
    # 00:58): three plain runs on one store (the later ones preload its choices), then two under
    # gdb with every thread's stack.
    g=$(command -v gdb || echo /usr/local/cuda/bin/cuda-gdb)
    export KILN_CACHE_DIR=$OUT/exitcrash_store
    tune_args=(tune --matmul 256x256x256,200x250x256 --precision high --layout NT)
    for i in 1 2 3; do
      timeout 60 .device/run kiln "${tune_args[@]}" >"$OUT/exitcrash_$i.txt" 2>&1
      echo "plain run $i: exit $? (139: SIGSEGV)"
    done
    for i in 1 2; do
      timeout 90 .device/run "$g" -q -batch -ex run -ex bt -ex "thread apply all bt 25" \
        --args .device/bin/kiln "${tune_args[@]}" 2>&1 |
        grep -v "^\[New Thread\|^\[Thread .* exited\|Cuda Driver\|cuFuncGetParamInfo\|^$" \
          >"$OUT/exitcrash_gdb_$i.txt"
      grep -E -A40 "SIGSEGV" "$OUT/exitcrash_gdb_$i.txt" | head -60
      grep -E "exited" "$OUT/exitcrash_gdb_$i.txt"
    done
    unset KILN_CACHE_DIR
    ;;
  exitattn)
    # kiln_attention_ops died of SIGSEGV at exit after its last line (H100, 2026-12-07 10:47):
    # three more runs, whose cores read_cores prints with kiln's names (bundle it unstripped).
    for i in 1 2 3; do
      timeout 60 .device/run kiln_attention_ops >"$OUT/exitattn_$i.txt" 2>&1
      echo "run $i: exit $? (139: SIGSEGV)"
    done
    ;;
  attnkernels)
    # Every kernel of the bf16 attention rows (kiln with cuDNN, PyTorch's SDPA), by name and
    # device time: where kiln's forward + backward differs from PyTorch's (Nsight Systems, when the
    # machine has it; kiln's own profile otherwise).
    nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
    echo "nsys: ${nsys:-none}"
    if [ -n "$nsys" ]; then
      for prog in ".device/run kiln_attention_ops" "python3 .device/peers/torch_attention.py"; do
        name=$(echo "$prog" | awk '{print $2}' | xargs basename)
        # shellcheck disable=SC2086
        timeout 150 "$nsys" profile -o "$OUT/nsys_$name" --force-overwrite true $prog --runs 1 \
          --batch 5 >"$OUT/nsys_$name.log" 2>&1
        timeout 100 "$nsys" stats -q -r cuda_gpu_kern_sum -f csv "$OUT/nsys_$name.nsys-rep" \
          2>/dev/null | cut -c1-220 | head -40
      done
    else
      KILN_LOG=profile t timeout 90 .device/run kiln_attention_ops --runs 1 2>&1 | tail -40
    fi
    ;;
  fusion)
    # Issue 19's "fusion is never a loss": the fusion and reduction tests and the fuzzer on CUDA,
    # the short-innermost reductions and the named-intermediate program, the fuzzer's benchmark
    # twin (generated programs fused and unfused, the worst ratio), and the bf16 GPT-2 step.
    t timeout 150 .device/run kiln_tests --gtest_filter='*Fusion*:*Prologue*:*Reduce*' \
      >"$OUT/fusion_tests.log" 2>&1
    grep -E "^\[  FAILED|PASSED|Failure" "$OUT/fusion_tests.log" | head -20
    t timeout 60 .device/run kiln_short_reductions --device cuda
    t timeout 200 .device/run kiln_fusion_programs --device cuda
    t timeout 150 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16
    ;;
  index)
    # Issue 19's embedding gather and scatter-add at GPT-2 sizes beside PyTorch's, and the fusion
    # test of a named intermediate that a reduction consumes.
    t timeout 100 .device/run kiln_index_ops
    t timeout 100 python3 .device/peers/torch_index_ops.py
    tests_and_memcheck index '*FusionTest.ANamedIntermediate*:*IndexTest*:CudaCompileIndex*' \
      '*IndexTest*cuda*'
    ;;
  changed)
    changed_tests
    ;;
  rowops)
    # Issue 19's row ops and fused cross-entropy at the issue's shapes, beside PyTorch's.
    t timeout 100 .device/run kiln_row_ops
    t timeout 300 python3 .device/peers/torch_row_ops.py
    t timeout 60 .device/run kiln_cross_entropy
    t timeout 90 python3 .device/peers/torch_cross_entropy.py
    ;;
  tuneahead)
    # GPT-2's bf16 products tuned ahead of time with every candidate (kiln tune --exhaustive; a
    # bucket's first problem decides it), then the step on that store: its time and its products'
    # device time, beside tunelog's first-call choices.
    export KILN_CACHE_DIR=$OUT/tuned
    k() { t timeout 100 .device/run kiln tune --dtype bf16 --exhaustive "$@" | grep -E "tuned now|already"; }
    k --layout NT --bias --matmul 16384x2304x768,16384x768x768,16384x768x3072
    k --layout NT --matmul 16384x50304x768
    k --layout NN --matmul 16384x768x2304,16384x768x768,16384x3072x768,16384x768x3072,16384x768x50304
    k --layout TN --matmul 2304x768x16384,3072x768x16384,768x3072x16384,50304x768x16384
    t timeout 100 .device/run kiln_gpt2_train --device cuda --steps 10 --autocast bf16 | tail -3
    KILN_LOG=profile t timeout 100 .device/run kiln_gpt2_train --device cuda --steps 3 \
      --autocast bf16 2>&1 | grep -E "cublasLt" | head -16
    unset KILN_CACHE_DIR
    ;;
  esac
done
