// KV store kernels on the emulated device: rows of a fused projection output (row stride wider
// than the KV width) scattered into shuffled pages through a block table, starting mid-page and
// crossing pages, ragged counts, padded slot and page strides, f32 and bf16. Every slot the
// launch must not touch keeps its sentinel; written values are compared bit for bit. The slot
// address is written out here again, as attention's reference reads it.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Element>
void checkKvStore(const codegen::KvStoreParams &params, std::mt19937 &random, int trial) {
  const codegen::KernelSource kernel = *codegen::generateKvStore(params);
  const int kvWidth = static_cast<int>(params.kvWidth);
  const int pageSize = static_cast<int>(params.pageSize);
  const int firstSlot = trial == 0 ? 0 : randomInt(random, 0, 3 * pageSize);
  const int count = trial == 1 ? 1 : randomInt(random, 1, 4 * pageSize + 3);
  const bool padded = trial % 2 == 1;
  // k and v are views into one [count, q | k | v] buffer.
  const long long rowStride = 2 * kvWidth + 8 + (padded ? 16 : 0);
  const long long slotStride = kvWidth + (padded ? 8 : 0);
  const long long pageStride = pageSize * slotStride + (padded ? 16 : 0);

  const int pagesUsed = (firstSlot + count + pageSize - 1) / pageSize;
  const int poolPages = pagesUsed + 3;
  std::vector<int> order(poolPages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  std::vector<int> blockTable(order.begin(), order.begin() + pagesUsed);

  std::vector<Element> fused(static_cast<size_t>(count * rowStride));
  std::uniform_real_distribution<float> value(-2.f, 2.f);
  for (Element &element : fused)
    element = storeAs<Element>(value(random));
  const Element sentinel = storeAs<Element>(-777.f);
  std::vector<Element> kPages(static_cast<size_t>(poolPages * pageStride), sentinel);
  std::vector<Element> vPages(kPages.size(), sentinel);

  const Element *kArg = fused.data() + 8, *vArg = fused.data() + 8 + kvWidth;
  const int *tableArg = blockTable.data();
  Element *kPagesArg = kPages.data(), *vPagesArg = vPages.data();
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>(count)}, emu::Dim3{kernel.blockThreads}, kArg,
      vArg, rowStride, count, tableArg, firstSlot, kPagesArg, vPagesArg, pageStride, slotStride)));

  std::vector<bool> written(kPages.size(), false);
  for (int row = 0; row < count; ++row) {
    const int slot = firstSlot + row;
    const long long at = blockTable[slot / pageSize] * pageStride + (slot % pageSize) * slotStride;
    for (int i = 0; i < kvWidth; ++i) {
      written[at + i] = true;
      ASSERT_EQ(std::memcmp(&kPages[at + i], kArg + row * rowStride + i, sizeof(Element)), 0)
          << kernel.name << " k row " << row << " (slot " << slot << ") element " << i;
      ASSERT_EQ(std::memcmp(&vPages[at + i], vArg + row * rowStride + i, sizeof(Element)), 0)
          << kernel.name << " v row " << row << " (slot " << slot << ") element " << i;
    }
  }
  for (size_t i = 0; i < kPages.size(); ++i)
    if (!written[i]) {
      ASSERT_EQ(loadFloat(kPages[i]), loadFloat(sentinel)) << kernel.name << ": stray k write at "
                                                           << i;
      ASSERT_EQ(loadFloat(vPages[i]), loadFloat(sentinel)) << kernel.name << ": stray v write at "
                                                           << i;
    }
}

TEST(KvStoreKernel, WritesRowsToTheirPagedSlots) {
  std::mt19937 random(47);
  for (const codegen::KvStoreParams &params : kvStoreConfigs()) {
    for (int trial = 0; trial < 5; ++trial) {
      SCOPED_TRACE(testing::Message() << "kv width " << params.kvWidth << " page "
                                      << params.pageSize << " "
                                      << codegen::elementTypeName(params.element) << " trial "
                                      << trial);
      if (params.element == codegen::ElementType::bf16)
        checkKvStore<__nv_bfloat16>(params, random, trial);
      else
        checkKvStore<float>(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

} // namespace
