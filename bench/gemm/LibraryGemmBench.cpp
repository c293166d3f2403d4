// oneDNN's own rate on given GEMM shapes, each call alone and warm: the baseline that the
// forward's GEMM rate (dlm-prof's gemm_shapes) is held to by bench/gemm_rate.py.
// y[M, N] = x[M, K] W^T with W [N, K] as artifacts store it, in three ways:
//   sgemm_nt       dnnl_sgemm reading W transposed (what the CPU backend did before PackedLinear)
//   sgemm_nn       dnnl_sgemm on W^T [K, N] (PackedLinear's layout and call)
//   matmul_packed  a matmul primitive for this M with weights reordered once into the layout the
//                  primitive chose (format_tag::any)
//   matmul_packed_streamed
//                  the same, each call on the next of enough packed copies (kStreamedBytes, several
//                  times a server's last-level cache) that its weights come from memory, as every
//                  weight of a forward does: a model's weights are read once per forward. Not
//                  part of "best" (which is called alone, warm); it shows what the library does
//                  with the forward's access pattern.
// Each cell is the median GFLOP/s over the repeats; the methods are interleaved in each repeat.
//
//   dlm-bench-gemm-library --shape 69x768x2048 [--shape ...] [--threads 2] [--repeats 9] [--json]
#include "bench/gemm/GemmBenchSupport.h"
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <string>
#include <vector>

namespace {

using dlm::bench::median;
using dlm::bench::setOmpThreads;

using Clock = std::chrono::steady_clock;
using Tag = dnnl::memory::format_tag;
using Type = dnnl::memory::data_type;

struct Shape {
  int64_t m = 0, n = 0, k = 0;
};

// GFLOP/s of `call` over enough calls to fill ~50 ms, so that small shapes are not timer noise.
template <typename Call> double rate(Call &&call, double flops) {
  const int calls = static_cast<int>(std::clamp(5e7 / flops * 2, 1.0, 5000.0));
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i)
    call();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return flops * calls / seconds * 1e-9;
}

bool parseShape(const char *text, Shape &shape) {
  long long m, n, k;
  char tail;
  if (std::sscanf(text, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 || k <= 0)
    return false;
  shape = {m, n, k};
  return true;
}

// The packed copies matmul_packed_streamed cycles through: 8x a 32 MiB last-level cache.
constexpr size_t kStreamedBytes = size_t(256) << 20;

struct Rates {
  std::vector<double> sgemmNt, sgemmNn, matmulPacked, matmulStreamed;
  std::string matmulImpl;
};

Rates measure(const Shape &s, int repeats, dnnl::engine &engine, dnnl::stream &stream) {
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(s.m * s.k)), w(static_cast<size_t>(s.n * s.k)),
      wt(w.size()), y(static_cast<size_t>(s.m * s.n));
  for (float &v : x)
    v = uniform(generator);
  for (float &v : w)
    v = uniform(generator);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      wt[static_cast<size_t>(k * s.n + n)] = w[static_cast<size_t>(n * s.k + k)];

  using dnnl::memory;
  const memory::desc src({s.m, s.k}, Type::f32, Tag::ab), dst({s.m, s.n}, Type::f32, Tag::ab);
  const memory::desc anyWeights({s.k, s.n}, Type::f32, Tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, anyWeights, dst), engine);
  memory plain({{s.k, s.n}, Type::f32, Tag::ba}, engine, w.data());
  memory packed(pd.weights_desc(), engine);
  dnnl::reorder(plain, packed).execute(stream, plain, packed);
  memory xMemory(src, engine, x.data()), yMemory(dst, engine, y.data());
  dnnl::matmul matmul(pd);
  const std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, xMemory}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, yMemory}};

  auto sgemmNt = [&] {
    if (dnnl_sgemm('N', 'T', s.m, s.n, s.k, 1.0f, x.data(), s.k, w.data(), s.k, 0.0f, y.data(),
                   s.n) != dnnl_success)
      std::abort();
  };
  auto sgemmNn = [&] {
    if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, x.data(), s.k, wt.data(), s.n, 0.0f, y.data(),
                   s.n) != dnnl_success)
      std::abort();
  };
  auto matmulPacked = [&] {
    matmul.execute(stream, args);
    stream.wait();
  };
  const size_t copies = std::max<size_t>(2, kStreamedBytes / pd.weights_desc().get_size());
  std::vector<std::unordered_map<int, memory>> streamedArgs;
  for (size_t c = 0; c < copies; ++c) {
    memory copy(pd.weights_desc(), engine);
    dnnl::reorder(packed, copy).execute(stream, packed, copy);
    streamedArgs.push_back(
        {{DNNL_ARG_SRC, xMemory}, {DNNL_ARG_WEIGHTS, copy}, {DNNL_ARG_DST, yMemory}});
  }
  stream.wait();
  size_t next = 0;
  auto matmulStreamed = [&] {
    matmul.execute(stream, streamedArgs[next++ % copies]);
    stream.wait();
  };
  const double flops = 2.0 * s.m * s.n * s.k;
  sgemmNt(); // warm: caches, pages, the OpenMP team, oneDNN's kernels
  sgemmNn();
  matmulPacked();
  Rates rates;
  rates.matmulImpl = pd.impl_info_str();
  for (int r = 0; r < repeats; ++r) {
    rates.sgemmNt.push_back(rate(sgemmNt, flops));
    rates.sgemmNn.push_back(rate(sgemmNn, flops));
    rates.matmulPacked.push_back(rate(matmulPacked, flops));
    rates.matmulStreamed.push_back(rate(matmulStreamed, flops));
  }
  return rates;
}

} // namespace

int main(int argc, char **argv) {
  int threads = 2, repeats = 9;
  bool json = false;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    Shape shape;
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc && parseShape(argv[i + 1], shape)) {
      shapes.push_back(shape);
      ++i;
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "usage: dlm-bench-gemm-library --shape MxNxK [--shape ...] "
                           "[--threads N] [--repeats N] [--json]\n");
      return 2;
    }
  }
  if (shapes.empty())
    shapes = {{69, 768, 768}, {69, 2048, 768}, {69, 768, 2048}};
  threads = std::max(threads, 1);
  repeats = std::max(repeats, 1);
  setOmpThreads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);

  if (json)
    std::printf("{\"threads\": %d, \"repeats\": %d, \"shapes\": [", threads, repeats);
  else
    std::printf("%d threads, median of %d repeats, GFLOP/s\n\n| M | N | K | sgemm_nt | "
                "sgemm_nn | matmul_packed | matmul_packed_streamed | matmul impl |\n"
                "|---|---|---|---|---|---|---|---|\n",
                threads, repeats);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &s = shapes[i];
    const Rates r = measure(s, repeats, engine, stream);
    const double nt = median(r.sgemmNt), nn = median(r.sgemmNn), mm = median(r.matmulPacked),
                 streamed = median(r.matmulStreamed);
    if (json)
      std::printf("%s{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"sgemm_nt\": %.3f, \"sgemm_nn\": "
                  "%.3f, \"matmul_packed\": %.3f, \"matmul_packed_streamed\": %.3f, "
                  "\"matmul_impl\": \"%s\"}",
                  i ? ", " : "", static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), nt, nn, mm, streamed, r.matmulImpl.c_str());
    else
      std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.1f | %.1f | %s |\n",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), nt, nn, mm, streamed, r.matmulImpl.c_str());
    std::fflush(stdout);
  }
  if (json)
    std::printf("]}\n");
  return 0;
}
