// What the GEMM benchmarks share: the median of the repeats, and the OpenMP team size oneDNN's
// calls use (omp_get_max_threads(), a per-thread setting: looked up, not linked, as
// runtime/cpu/Gemm.cpp does).
#pragma once

#include <algorithm>
#include <dlfcn.h>
#include <vector>

namespace dlm::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline void setOmpThreads(int threads) {
  using SetNumThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetNumThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads")))
    set(threads);
}

} // namespace dlm::bench
