// dlm-bench-memory: how fast this machine streams a buffer far larger than its caches, read once
// per pass by N threads each summing its share (the access pattern of a forward reading its
// weights once), as GB/s (10^9 bytes): the median and the best of the passes.
//
//   dlm-bench-memory [--mib 1024] [--threads 2] [--repeats 7] [--json]
//
// The buffer is written first (so that its pages exist); the sum is printed so that the reads
// cannot be optimised away.
#include "bench/gemm/GemmBenchSupport.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int64_t mib = 1024;
  int threads = 2;
  int repeats = 7;
  bool json = false;
};

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc)
      return false;
    const long long value = std::atoll(argv[++i]);
    if (value < 1)
      return false;
    if (flag == "--mib")
      o.mib = value;
    else if (flag == "--threads")
      o.threads = static_cast<int>(value);
    else if (flag == "--repeats")
      o.repeats = static_cast<int>(value);
    else
      return false;
  }
  return true;
}

// Eight independent sums so that the loop is bound by loads, not by one add's latency; built
// for the widest vectors the CPU has (as the runtime's loops are), so that a core issues loads
// as fast as the kernels it bounds do.
#if defined(__x86_64__) && defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
uint64_t sumWords(const uint64_t *words, size_t count) {
  uint64_t s[8] = {};
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int j = 0; j < 8; ++j)
      s[j] += words[i + j];
  for (; i < count; ++i)
    s[0] += words[i];
  uint64_t total = 0;
  for (uint64_t v : s)
    total += v;
  return total;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: dlm-bench-memory [--mib N] [--threads N] [--repeats N] [--json]\n");
    return 2;
  }
  const size_t words = static_cast<size_t>(o.mib) * 1024 * 1024 / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i)
    buffer[i] = i;
  const size_t share = (words + o.threads - 1) / o.threads;
  std::vector<double> rates;
  uint64_t checksum = 0;
  for (int r = 0; r < o.repeats; ++r) {
    std::vector<uint64_t> sums(static_cast<size_t>(o.threads));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> team;
    for (int t = 0; t < o.threads; ++t)
      team.emplace_back([&, t] {
        const size_t begin = std::min(words, share * t), end = std::min(words, begin + share);
        sums[static_cast<size_t>(t)] = sumWords(buffer.data() + begin, end - begin);
      });
    for (std::thread &thread : team)
      thread.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(words * sizeof(uint64_t)) / seconds * 1e-9);
    for (uint64_t s : sums)
      checksum += s;
  }
  const double median = dlm::bench::median(rates);
  const double best = *std::max_element(rates.begin(), rates.end());
  if (o.json)
    std::printf("{\"mib\": %lld, \"threads\": %d, \"repeats\": %d, \"median_gb_s\": %.3f, "
                "\"best_gb_s\": %.3f, \"checksum\": %llu}\n",
                static_cast<long long>(o.mib), o.threads, o.repeats, median, best,
                static_cast<unsigned long long>(checksum));
  else
    std::printf("read bandwidth, %lld MiB, %d threads: median %.2f GB/s, best %.2f GB/s "
                "(checksum %llu)\n",
                static_cast<long long>(o.mib), o.threads, median, best,
                static_cast<unsigned long long>(checksum));
  return 0;
}
