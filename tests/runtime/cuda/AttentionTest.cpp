// Paged attention kernels on the emulated device against a double reference, for every mask
// kind: ragged KV lengths (partial last pages, lengths below a warp, long contexts of many
// tiles), scattered pages, padded strides, several requests per launch mixing causal and
// non-causal requests, queries that are the last keys or scattered positions, GQA and MHA,
// scale 1/sqrt(d) and 1, bf16 and f32 storage, head dims down to 16 (idle lanes). Unused KV
// slots hold NaN, so a kernel that reads past a request's keys fails loudly.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <algorithm>
#include <type_traits>
#include <limits>
#include <numeric>

namespace {

using namespace dlm;
using namespace dlm::cudatest;
using codegen::MaskKind;

// The masks as dlm.masked_attention defines them; a causal request is causal (and windowed
// under the sliding kinds) whatever the kernel's kind.
bool visible(MaskKind mask, bool causalRequest, long long query, long long key, long long window,
             long long blockSize) {
  const bool windowed = mask == MaskKind::slidingWindow || mask == MaskKind::slidingWindowSymmetric;
  if (causalRequest || mask == MaskKind::causal || mask == MaskKind::slidingWindow)
    return key <= query && (!windowed || query - key < window);
  switch (mask) {
  case MaskKind::bidirectional:
    return true;
  case MaskKind::blockCausal:
    return key / blockSize <= query / blockSize;
  case MaskKind::slidingWindowSymmetric:
    return std::llabs(query - key) < window;
  default:
    return false;
  }
}

struct Request {
  int keys = 0;
  std::vector<int> positions; // of its queries
  bool causal = false;
  std::vector<int> pages;
};

// T is the kernel's storage type (params.element): q, K/V pages and out.
template <typename T>
void checkAttention(const codegen::AttentionParams &params, std::mt19937 &random, int trial) {
  StatusOr<codegen::KernelSource> generated = codegen::generateAttention(params);
  ASSERT_TRUE(generated) << generated.status().message();
  const codegen::KernelSource &kernel = *generated;
  const int headDim = static_cast<int>(params.headDim);
  const int heads = static_cast<int>(params.heads);
  const int kvHeads = static_cast<int>(params.kvHeads);
  const int group = heads / kvHeads;
  const int pageSize = static_cast<int>(params.pageSize);
  const int rowsPerBlock =
      4 * static_cast<int>(std::get<int64_t>(kernel.specialisation.at("rows_per_warp")));

  // Requests: ragged lengths, the last trial with a request of a single key and one without
  // queries (its blocks must exit without touching anything).
  const int requestCount = randomInt(random, 1, 3) + (trial == 3 ? 1 : 0);
  std::vector<Request> requests(requestCount);
  for (int r = 0; r < requestCount; ++r) {
    Request &request = requests[r];
    // Trial 4 runs long contexts (many tiles, many rescalings) with few queries.
    request.keys = trial == 3 && r == 0 ? 1 : randomInt(random, 1, trial == 4 ? 420 : 130);
    int queries = randomInt(random, 1, std::min(request.keys, trial == 4 ? 6 : 37));
    if (trial == 3 && r == requestCount - 1)
      queries = 0;
    if (randomInt(random, 0, 2) > 0) {
      for (int i = 0; i < queries; ++i)
        request.positions.push_back(request.keys - queries + i); // the newest keys
    } else {
      std::vector<int> all(request.keys);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), random);
      request.positions.assign(all.begin(), all.begin() + queries);
    }
    request.causal = params.mask != MaskKind::causal && randomInt(random, 0, 2) == 0;
  }
  const int window = randomInt(random, 1, 48);
  const int blockSize = std::vector<int>{4, 8, 16, 32}[randomInt(random, 0, 3)];
  const bool unitScale = trial == 2;
  const float scale = unitScale ? 1.f : static_cast<float>(1.0 / std::sqrt(headDim));
  const float queryAmplitude = unitScale ? 0.25f : 3.f;

  // Pages, handed out in a shuffled order so a request's pages are not contiguous.
  int pageCount = 3;
  int maxPages = 1;
  for (Request &request : requests) {
    const int needed = (request.keys + pageSize - 1) / pageSize;
    pageCount += needed;
    maxPages = std::max(maxPages, needed + 1);
  }
  std::vector<int> order(pageCount);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  std::vector<int> blockTables(static_cast<size_t>(requestCount * maxPages), -1);
  int nextPage = 0;
  for (int r = 0; r < requestCount; ++r)
    for (int p = 0; p < (requests[r].keys + pageSize - 1) / pageSize; ++p) {
      requests[r].pages.push_back(order[nextPage++]);
      blockTables[r * maxPages + p] = requests[r].pages.back();
    }

  const bool padded = trial % 2 == 1;
  const long long slotStride = kvHeads * headDim + (padded ? 8 : 0);
  const long long pageStride = pageSize * slotStride + (padded ? 16 : 0);
  const T nan = storeAs<T>(std::numeric_limits<float>::quiet_NaN());
  std::vector<T> kPool(static_cast<size_t>(pageCount * pageStride), nan);
  std::vector<T> vPool(kPool.size(), nan);
  // Logical keys and values per request: [key][kvHead][dim].
  std::vector<std::vector<float>> keys(requestCount), values(requestCount);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  for (int r = 0; r < requestCount; ++r) {
    keys[r].resize(static_cast<size_t>(requests[r].keys * kvHeads * headDim));
    values[r].resize(keys[r].size());
    for (int j = 0; j < requests[r].keys; ++j)
      for (int e = 0; e < kvHeads * headDim; ++e) {
        const long long at =
            requests[r].pages[j / pageSize] * pageStride + (j % pageSize) * slotStride + e;
        kPool[at] = storeAs<T>(unit(random));
        vPool[at] = storeAs<T>(unit(random));
        keys[r][j * kvHeads * headDim + e] = loadFloat(kPool[at]);
        values[r][j * kvHeads * headDim + e] = loadFloat(vPool[at]);
      }
  }

  std::vector<int> queryStarts{0}, queryPositions;
  std::vector<int> kvLengths;
  std::vector<unsigned char> causalFlags;
  int maxQueries = 0;
  for (const Request &request : requests) {
    queryStarts.push_back(queryStarts.back() + static_cast<int>(request.positions.size()));
    queryPositions.insert(queryPositions.end(), request.positions.begin(), request.positions.end());
    kvLengths.push_back(request.keys);
    causalFlags.push_back(request.causal ? 1 : 0);
    maxQueries = std::max(maxQueries, static_cast<int>(request.positions.size()));
  }
  const int tokens = queryStarts.back();
  const long long qStride = heads * headDim + (padded ? 8 : 0);
  std::vector<float> exactQ;
  // Queries are drawn bf16-representable, so they are exact in either storage type.
  randomBf16(random, static_cast<size_t>(std::max(tokens, 1) * qStride), -queryAmplitude,
                 queryAmplitude, &exactQ);
  std::vector<T> q(exactQ.size());
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = storeAs<T>(exactQ[i]);
  const float sentinel = 99.f;
  std::vector<T> out(q.size(), storeAs<T>(sentinel));

  const T *qArg = q.data(), *kArg = kPool.data(), *vArg = vPool.data();
  const int *tableArg = blockTables.data(), *startArg = queryStarts.data(),
            *positionArg = queryPositions.data(), *lengthArg = kvLengths.data();
  const unsigned char *causalArg =
      trial == 0 && params.mask == MaskKind::causal ? nullptr : causalFlags.data();
  T *outArg = out.data();
  const unsigned blocksX =
      static_cast<unsigned>(std::max(1, (maxQueries * group + rowsPerBlock - 1) / rowsPerBlock));
  const Status status = emulatedDevice().launchArgs(
      kernel.name,
      emu::Dim3{blocksX, static_cast<unsigned>(kvHeads), static_cast<unsigned>(requestCount)},
      emu::Dim3{kernel.blockThreads}, qArg, qStride, kArg, vArg, pageStride, slotStride, tableArg,
      maxPages, startArg, positionArg, lengthArg, causalArg, window, blockSize, scale, outArg,
      qStride);
  ASSERT_TRUE(status) << status.message();

  std::vector<bool> written(out.size(), false);
  for (int r = 0; r < requestCount; ++r) {
    const Request &request = requests[r];
    for (size_t i = 0; i < request.positions.size(); ++i) {
      const int token = queryStarts[r] + static_cast<int>(i);
      const int query = request.positions[i];
      for (int h = 0; h < heads; ++h) {
        const int g = h / group;
        const float *queryRow = exactQ.data() + token * qStride + h * headDim;
        std::vector<double> weights(request.keys, 0.0);
        double maximum = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < request.keys; ++j) {
          if (!visible(params.mask, request.causal, query, j, window, blockSize))
            continue;
          double dot = 0;
          for (int d = 0; d < headDim; ++d)
            dot += static_cast<double>(queryRow[d]) * keys[r][(j * kvHeads + g) * headDim + d];
          weights[j] = dot * scale;
          maximum = std::max(maximum, weights[j]);
        }
        double total = 0;
        for (int j = 0; j < request.keys; ++j) {
          const bool seen = visible(params.mask, request.causal, query, j, window, blockSize);
          weights[j] = seen ? std::exp(weights[j] - maximum) : 0.0;
          total += weights[j];
        }
        for (int d = 0; d < headDim; ++d) {
          double want = 0;
          for (int j = 0; j < request.keys; ++j)
            want += weights[j] * values[r][(j * kvHeads + g) * headDim + d];
          want = total > 0 ? want / total : 0.0;
          const size_t at = static_cast<size_t>(token * qStride + h * headDim + d);
          written[at] = true;
          // bf16: the output's rounding; f32: only fp32 accumulation and the fast exp.
          const double atol = std::is_same_v<T, float> ? 2e-4 : 2e-3;
          ASSERT_TRUE(near(loadFloat(out[at]), want, atol, 2 * storageRounding<T>(),
                           kernel.name + " request " + std::to_string(r) + " (" +
                               std::to_string(request.keys) + " keys, causal " +
                               std::to_string(request.causal) + ", window " +
                               std::to_string(window) + ", block " + std::to_string(blockSize) +
                               ") query position " + std::to_string(query) + " head " +
                               std::to_string(h) + " dim " + std::to_string(d)));
        }
      }
    }
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (!written[i])
      ASSERT_EQ(loadFloat(out[i]), sentinel) << kernel.name << ": wrote outside its rows at " << i;
}

TEST(AttentionKernel, EveryMaskKindMatchesDoubleReference) {
  std::mt19937 random(2024);
  for (const codegen::AttentionParams &params : attentionConfigs()) {
    for (int trial = 0; trial < 6; ++trial) {
      SCOPED_TRACE(testing::Message()
                   << codegen::maskKindName(params.mask) << " "
                   << codegen::elementTypeName(params.element) << " head_dim " << params.headDim
                   << " trial " << trial);
      if (params.element == codegen::ElementType::f32)
        checkAttention<float>(params, random, trial);
      else
        checkAttention<__nv_bfloat16>(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

// A row that sees no key (its sliding window lies entirely past the request's keys) yields zeros,
// not NaN from 0 / 0.
TEST(AttentionKernel, RowWithoutVisibleKeysIsZero) {
  const codegen::AttentionParams params{64, 4, 2, 16, MaskKind::slidingWindow};
  const codegen::KernelSource kernel = *codegen::generateAttention(params);
  // One request with 3 keys; its query sits at position 40, so with window 4 it sees none.
  std::vector<__nv_bfloat16> q(4 * 64, toBf16(0.5f)), pool(16 * 2 * 64, toBf16(0.25f));
  std::vector<__nv_bfloat16> out(q.size(), toBf16(7.f));
  std::vector<int> table{0}, starts{0, 1}, positions{40}, lengths{3};
  const __nv_bfloat16 *qArg = q.data(), *kArg = pool.data(), *vArg = pool.data();
  const int *t = table.data(), *s = starts.data(), *p = positions.data(), *l = lengths.data();
  const unsigned char *flags = nullptr;
  __nv_bfloat16 *o = out.data();
  const long long stride = 4 * 64, slot = 2 * 64, page = 16 * slot;
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(kernel.name, emu::Dim3{1, 2, 1}, emu::Dim3{128},
                                                   qArg, stride, kArg, vArg, page, slot, t, 1, s, p,
                                                   l, flags, 4, 16, 0.125f, o, stride)));
  for (const __nv_bfloat16 &value : out)
    ASSERT_EQ(fromBf16(value), 0.f);
}

} // namespace
