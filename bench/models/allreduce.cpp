// all_reduce's bus bandwidth, issue 22's communication figure, as nccl-tests reports it: one
// process per GPU (`kiln launch -n N kiln_allreduce`), kiln::dist::all_reduce (sum) of f32 and
// bf16 tensors from 1 MiB to 256 MiB, the median of 20 timed calls after 5 warm-up calls, each
// call timed from queue to the device's sync. algbw = bytes / time; busbw = algbw * 2 (N - 1) / N,
// the bytes each GPU's link carries in a ring, comparable across world sizes. Rank 0 prints.
//
//   kiln launch -n 8 kiln_allreduce [--max-mib 256]
//
// bench/peers/allreduce_torch.py is the same with torch.distributed (torchrun --nproc-per-node N).
// Alone (no launcher) it is a job of one, where NCCL's all-reduce is a copy and busbw is 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

namespace {

void run(std::int64_t max_mib) {
  namespace dist = kiln::dist;
  const kiln::Device dev = kiln::Device::cuda(dist::launch_env().local_rank);
  dist::init_process_group(dev);
  const int n = dist::world_size();
  if (dist::rank() == 0)
    std::printf("kiln all_reduce (sum) over %d ranks, %s; median of 20 calls\n%10s %6s %12s %12s\n",
                n, dev.backend_name().c_str(), "bytes", "dtype", "algbw GB/s", "busbw GB/s");
  for (kiln::DType dt : {kiln::DType::f32, kiln::DType::bf16}) {
    for (std::int64_t mib = 1; mib <= max_mib; mib *= 4) {
      const std::int64_t bytes = mib << 20;
      const auto x =
          kiln::Tensor<1>::ones({bytes / static_cast<std::int64_t>(kiln::dtype_size(dt))}, dt, dev);
      std::vector<double> samples;
      for (int i = 0; i < 25; ++i) {
        dev.sync();
        const auto t0 = std::chrono::steady_clock::now();
        const auto y = dist::all_reduce(x);
        dev.sync();
        if (i >= 5)
          samples.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(samples.begin(), samples.end());
      const double algbw = static_cast<double>(bytes) / samples[samples.size() / 2] / 1e9;
      if (dist::rank() == 0)
        std::printf("%10lld %6s %12.1f %12.1f\n", static_cast<long long>(bytes),
                    kiln::dtype_name(dt), algbw, algbw * 2 * (n - 1) / n);
    }
  }
  dist::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t max_mib = 256;
  if (argc == 3 && std::string(argv[1]) == "--max-mib") max_mib = std::atoll(argv[2]);
  if (!(argc == 1 || argc == 3) || max_mib <= 0) {
    std::fprintf(stderr, "usage: kiln_allreduce [--max-mib N]\n");
    return 2;
  }
  try {
    run(max_mib);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
