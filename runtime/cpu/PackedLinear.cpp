#include "runtime/cpu/PackedLinear.h"

#include "runtime/cpu/BlockedTileKernels.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Vectorize.h"
#include "support/FloatFormats.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <unistd.h>

namespace dlm::cpu {

namespace {

using Tag = dnnl::memory::format_tag;
using Type = dnnl::memory::data_type;

// The row count the f32 layout is chosen for (any: it does not depend on it).
constexpr int64_t kLayoutRows = 64;
// A bf16 tile widened to float32 is at least kMinTileWidth columns wide, and else as wide as the
// core's L2 holds (the thread's sgemm reads it from there). Measured on the 86M bench model (a
// 1 MiB L2): 256 KiB tiles ran at ~345 GFLOP/s, 1 MiB tiles at ~365.
constexpr int64_t kMinTileWidth = 16;
constexpr int64_t kFallbackL2Bytes = 512 << 10;

int64_t tileBytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<int64_t>(l2) : kFallbackL2Bytes;
  }();
  return bytes;
}

std::string oneDnnError(const dnnl::error &e, const char *what) {
  return std::string("oneDNN: ") + what + " failed: " + e.what();
}

dnnl::memory::desc rowsDesc(int64_t rows, int64_t width) {
  return dnnl::memory::desc({rows, width}, Type::f32, Tag::ab);
}

// Up to this many rows a tile is multiplied a decoded row of W^T at a time (a GEMV reads the
// weights once), above it widened whole for an sgemm.
constexpr int64_t kSmallRows = 4;
// Up to this many rows bf16, int8 and int4 tiles multiply in registers where the CPU has AVX-512
// (BlockedTileKernels.h), 12 rows at a time. On the ~1B LLaDA shape (bench/forward_limit.py, bf16,
// 2-core Xeon, 2 threads) that beat widening each tile for an sgemm at 12, 36 and 68 rows a
// forward (GEMMs at 120-160 against 65-130 GFLOP/s); not measured between 68 and 128.
constexpr int64_t kBlockedRows = 128;
// Tiles of at least this many bytes in all are spread over the pool whatever the flops: with few
// rows the GEMM streams its weights, which one core does not do at the memory's rate (measured on
// DiffusionGemma's bench experts, [512, 512] bf16 with ~16 rows: 4.1 ms a moe record against 6.2
// on one thread; LLaDA2-mini's, ~2 rows: 74 ms against 112).
constexpr size_t kParallelTileBytes = 256 << 10;

DLM_VECTOR_CLONES void decodeBf16(const uint16_t *bits, int64_t count, float *out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = floatFromBf16(bits[i]);
}

DLM_VECTOR_CLONES void decodeInt8(const int8_t *q, const float *scales, int64_t count, float *out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(q[i]) * scales[i];
}

// Each code's value from a table: E4M3 has 256 codes.
void decodeFp8(const uint8_t *codes, const float *scales, int64_t count, float *out) {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> table{};
    for (int code = 0; code < 256; ++code)
      table[static_cast<size_t>(code)] = floatFromE4m3(static_cast<uint8_t>(code));
    return table;
  }();
  for (int64_t i = 0; i < count; ++i)
    out[i] = values[codes[i]] * scales[i];
}

// A row of an int4 tile (PackedLinear.h: 8 bytes per 16 columns, byte j holding columns j and
// j + 8) times its group's scales.
void decodeInt4(const uint8_t *codes, const uint16_t *scales, int64_t count, float *out) {
  for (int64_t c = 0; c < count; ++c) {
    const int nibble = (codes[(c / 16) * 8 + c % 8] >> (c % 16 < 8 ? 0 : 4)) & 0xF;
    out[c] = static_cast<float>(nibble >= 8 ? nibble - 16 : nibble) * floatFromF16(scales[c]);
  }
}

// acc[m, :width] += x[m * ldx] * w[:width] for the `rows` rows m.
DLM_VECTOR_CLONES void addScaledRow(const float *w, int64_t width, const float *x, int64_t ldx,
                                    int64_t rows, float *acc) {
  for (int64_t m = 0; m < rows; ++m) {
    const float a = x[m * ldx];
    float *out = acc + m * width;
    for (int64_t c = 0; c < width; ++c)
      out[c] += a * w[c];
  }
}

// The derived-weight cache's key for a bf16 weight packed the way `bf16` asks (each way its own
// copy: a test can ask for the emulated kernel beside a session's).
const char *bf16CacheKey(PackedLinear::Bf16Gemm bf16) {
  switch (bf16) {
  case PackedLinear::Bf16Gemm::weightOnly:
    return "tiles:";
  case PackedLinear::Bf16Gemm::bf16Arithmetic:
    return "bf16-arithmetic:";
  case PackedLinear::Bf16Gemm::bf16ArithmeticAnyKernel:
    return "bf16-arithmetic-any-kernel:";
  }
  return "tiles:";
}

std::string shapeText(int64_t rows, const PackedLinear &w) {
  return "[" + std::to_string(rows) + " x " + std::to_string(w.inputs()) + "] x [" +
         std::to_string(w.inputs()) + " x " + std::to_string(w.outputs()) + "]";
}

} // namespace

const dnnl::engine &cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

StatusOr<std::shared_ptr<const PackedLinear>> PackedLinear::of(const model::ModelWeights &weights,
                                                               std::string_view name,
                                                               int64_t outputs,
                                                               PackedLinear::Bf16Gemm bf16) {
  const model::StoredTensor *given = weights.stored(name);
  const bool tiled = given && PackedExperts::packs(given->dtype);
  return weights.derived<PackedLinear>(
      name,
      std::string("cpu-") + (tiled ? bf16CacheKey(bf16) : "onednn-f32:") + std::to_string(outputs),
      [&](const model::StoredTensor &stored) -> StatusOr<std::shared_ptr<const PackedLinear>> {
        if (outputs <= 0 || outputs > stored.rows)
          return Status::error("cannot pack " + std::to_string(outputs) + " of its " +
                               std::to_string(stored.rows) + " rows");
        auto packed = std::make_shared<PackedLinear>();
        packed->outputs_ = outputs;
        packed->inputs_ = stored.cols;
        DLM_RETURN_IF_ERROR(packed->pack(weights, stored, bf16));
        return std::shared_ptr<const PackedLinear>(std::move(packed));
      });
}

std::string PackedLinear::path() const {
  switch (format_) {
  case Format::f32Packed:
    return "f32 oneDNN " + implementation_;
  case Format::bf16Packed:
    return "bf16 x bf16 oneDNN " + implementation_;
  case Format::bf16Tiles:
    return "bf16 tiles, float32 arithmetic";
  case Format::int8Tiles:
    return "int8 tiles, float32 arithmetic";
  case Format::fp8Tiles:
    return "fp8 tiles, float32 arithmetic";
  case Format::int4Tiles:
    return "int4 tiles (groups of " + std::to_string(groupSize_) + "), float32 arithmetic";
  }
  return "unknown";
}

bool PackedExperts::packs(artifact::DType dtype) {
  return dtype == artifact::DType::bf16 || dtype == artifact::DType::i8 ||
         dtype == artifact::DType::fp8_e4m3 || dtype == artifact::DType::i4;
}

StatusOr<std::shared_ptr<const PackedExperts>> PackedExperts::of(const model::ModelWeights &weights,
                                                                 std::string_view name,
                                                                 int64_t experts,
                                                                 PackedLinear::Bf16Gemm bf16) {
  const model::StoredTensor *given = weights.stored(name);
  const bool bf16Stack = given && given->dtype == artifact::DType::bf16;
  return weights.derived<PackedExperts>(
      name,
      std::string("cpu-expert-") + (bf16Stack ? bf16CacheKey(bf16) : "tiles:") +
          std::to_string(experts),
      [&](const model::StoredTensor &stored) -> StatusOr<std::shared_ptr<const PackedExperts>> {
        if (!packs(stored.dtype) || experts <= 0 || stored.rows % experts != 0)
          return Status::error("internal error: cannot pack the " + std::to_string(stored.rows) +
                               " rows of " + artifact::dtypeName(stored.dtype) + " weight '" +
                               std::string(name) + "' as " + std::to_string(experts) + " experts");
        const int64_t n = stored.rows / experts;
        const size_t expertBytes = static_cast<size_t>(
            artifact::storageBytes(stored.dtype, static_cast<uint64_t>(n * stored.cols)));
        auto packed = std::make_shared<PackedExperts>();
        for (int64_t e = 0; e < experts; ++e) {
          const model::StoredTensor slice{
              stored.dtype,
              static_cast<const uint8_t *>(stored.data) + static_cast<size_t>(e) * expertBytes,
              n,
              stored.cols,
              stored.rowScales ? stored.rowScales + e * n : nullptr,
              stored.groupScales ? stored.groupScales + e * n * stored.groups() : nullptr,
              stored.groupSize};
          auto expert = std::make_unique<PackedLinear>();
          expert->outputs_ = n;
          expert->inputs_ = stored.cols;
          DLM_RETURN_IF_ERROR(expert->pack(weights, slice, bf16));
          packed->bytes_ += expert->bytes();
          packed->experts_.push_back(std::move(expert));
        }
        return std::shared_ptr<const PackedExperts>(std::move(packed));
      });
}

Status PackedLinear::pack(const model::ModelWeights &weights, const model::StoredTensor &stored,
                          Bf16Gemm bf16) {
  if (!PackedExperts::packs(stored.dtype)) {
    DLM_ASSIGN_OR_RETURN(bool packedF32, packOneDnn(weights, stored, Type::f32, bf16));
    (void)packedF32; // f32 matmuls are never reference code
    return Status::ok();
  }
  if (stored.dtype == artifact::DType::bf16 && bf16 != Bf16Gemm::weightOnly) {
    DLM_ASSIGN_OR_RETURN(bool native, packOneDnn(weights, stored, Type::bf16, bf16));
    if (native)
      return Status::ok();
  }
  return packTiles(weights, stored);
}

StatusOr<bool> PackedLinear::packOneDnn(const model::ModelWeights &weights,
                                        const model::StoredTensor &stored, Type type,
                                        Bf16Gemm bf16) {
  const int64_t n = outputs_, k = inputs_;
  try {
    const dnnl::engine &engine = cpuEngine();
    dnnl::matmul::primitive_desc chooser;
    try {
      chooser = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(dnnl::memory::desc({kLayoutRows, k}, type, Tag::ab),
                             dnnl::memory::desc({k, n}, type, Tag::any), rowsDesc(kLayoutRows, n)),
          engine);
    } catch (const dnnl::error &) {
      // No bf16 matmul at all (oneDNN 2.6 on AVX2 has none): the tiles do it.
      if (type == Type::bf16)
        return false;
      throw;
    }
    const std::string implementation = chooser.impl_info_str();
    if (type == Type::bf16 &&
        (implementation.rfind("ref", 0) == 0 ||
         (bf16 == Bf16Gemm::bf16Arithmetic && implementation.rfind("brg:", 0) != 0)))
      return false;
    implementation_ = implementation;
    layout_ = chooser.weights_desc();
    bytes_ = layout_.get_size();
    data_.reset(std::aligned_alloc(64, (bytes_ + 63) / 64 * 64));
    if (!data_)
      return Status::error("out of memory packing " + std::to_string(bytes_) + " bytes");
    memory_ = dnnl::memory(layout_, engine, data_.get());
    // W [N, K] row-major is the matmul's weights [K, N] in tag ba: copied (f32: widened) out of
    // the mapping first, a transient copy, then reordered into the layout the matmul picks.
    std::vector<float> widened;
    std::vector<uint16_t> halves;
    void *plain = nullptr;
    if (type == Type::f32) {
      widened.resize(static_cast<size_t>(n * k));
      DLM_RETURN_IF_ERROR(weights.readStored(
          [&] { model::widenStored(stored, 0, widened.size(), widened.data()); }));
      plain = widened.data();
    } else {
      halves.resize(static_cast<size_t>(n * k));
      DLM_RETURN_IF_ERROR(weights.readStored(
          [&] { std::memcpy(halves.data(), stored.data, halves.size() * sizeof(uint16_t)); }));
      plain = halves.data();
    }
    dnnl::memory source({{k, n}, type, Tag::ba}, engine, plain);
    dnnl::stream stream(engine);
    dnnl::reorder(source, memory_).execute(stream, source, memory_);
    stream.wait();
  } catch (const dnnl::error &e) {
    return Status::error(oneDnnError(e, "packing the weight"));
  }
  format_ = type == Type::f32 ? Format::f32Packed : Format::bf16Packed;
  return true;
}

void PackedLinear::chooseTileWidth() {
  const int64_t n = outputs_, k = inputs_;
  // As few tiles as fit, rounded up to a multiple of the hardware threads (the pool spreads whole
  // tiles: 3 tiles on 2 threads leave one idle a third of the time), then as narrow as they can
  // be: no tile is mostly padding.
  const int64_t fit =
      std::max(kMinTileWidth, tileBytes() / (k * static_cast<int64_t>(sizeof(float))));
  const int64_t cpus = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t count = std::min(((n + fit - 1) / fit + cpus - 1) / cpus * cpus,
                                 (n + kMinTileWidth - 1) / kMinTileWidth);
  tileWidth_ = ((n + count - 1) / count + kMinTileWidth - 1) / kMinTileWidth * kMinTileWidth;
}

Status PackedLinear::packTiles(const model::ModelWeights &weights,
                               const model::StoredTensor &stored) {
  if (stored.dtype == artifact::DType::i4)
    return packInt4Tiles(weights, stored);
  // int8 and FP8: one byte and a scale per column of W^T (row of W).
  const bool bytes =
      stored.dtype == artifact::DType::i8 || stored.dtype == artifact::DType::fp8_e4m3;
  if (!bytes && stored.dtype != artifact::DType::bf16)
    return Status::error(std::string("internal error: no tiles for dtype ") +
                         artifact::dtypeName(stored.dtype));
  format_ = stored.dtype == artifact::DType::i8         ? Format::int8Tiles
            : stored.dtype == artifact::DType::fp8_e4m3 ? Format::fp8Tiles
                                                        : Format::bf16Tiles;
  const int64_t n = outputs_, k = inputs_;
  chooseTileWidth();
  const size_t element = bytes ? 1 : 2;
  const size_t elements = static_cast<size_t>(tiles() * k * tileWidth_);
  bytes_ = elements * element;
  data_.reset(std::aligned_alloc(64, (bytes_ + 63) / 64 * 64));
  if (!data_)
    return Status::error("out of memory packing " + std::to_string(bytes_) + " bytes");
  std::memset(data_.get(), 0, bytes_);
  if (bytes) {
    columnScales_.assign(static_cast<size_t>(tiles() * tileWidth_), 0.0f);
    std::copy(stored.rowScales, stored.rowScales + n, columnScales_.begin());
    bytes_ += columnScales_.size() * sizeof(float);
  }
  // W [N, K] -> tiles of W^T: element (k, c) of tile t is W[t * T + c, k].
  auto transpose = [&](auto *out, const auto *w) {
    for (int64_t row = 0; row < n; ++row) {
      const int64_t t = row / tileWidth_, c = row % tileWidth_;
      auto *tile = out + t * k * tileWidth_ + c;
      const auto *source = w + row * k;
      for (int64_t i = 0; i < k; ++i)
        tile[i * tileWidth_] = source[i];
    }
  };
  return weights.readStored([&] {
    if (bytes)
      transpose(static_cast<uint8_t *>(data_.get()), static_cast<const uint8_t *>(stored.data));
    else
      transpose(static_cast<uint16_t *>(data_.get()), static_cast<const uint16_t *>(stored.data));
  });
}

// W [N, K] -> tiles of W^T as int4Tiles lays them out (PackedLinear.h), codes and group scales
// copied as stored (padding columns: code 0, scale 0).
Status PackedLinear::packInt4Tiles(const model::ModelWeights &weights,
                                   const model::StoredTensor &stored) {
  format_ = Format::int4Tiles;
  groupSize_ = stored.groupSize;
  const int64_t n = outputs_, k = inputs_, groups = stored.groups();
  if (groupSize_ <= 0 || k % groupSize_ != 0 || !stored.groupScales)
    return Status::error("internal error: an i4 weight without group scales");
  chooseTileWidth();
  const size_t codeBytes = static_cast<size_t>(tiles() * k * tileWidth_ / 2);
  data_.reset(std::aligned_alloc(64, (codeBytes + 63) / 64 * 64));
  if (!data_)
    return Status::error("out of memory packing " + std::to_string(codeBytes) + " bytes");
  std::memset(data_.get(), 0, codeBytes);
  groupScales_.assign(static_cast<size_t>(tiles() * groups * tileWidth_), 0);
  bytes_ = codeBytes + groupScales_.size() * sizeof(uint16_t);
  uint8_t *codes = static_cast<uint8_t *>(data_.get());
  return weights.readStored([&] {
    const uint8_t *w = static_cast<const uint8_t *>(stored.data);
    for (int64_t row = 0; row < n; ++row) {
      const int64_t t = row / tileWidth_, c = row % tileWidth_;
      // Column c of a tile row: byte (c / 16) * 8 + c % 8, low nibble for c % 16 < 8.
      uint8_t *tile = codes + t * k * tileWidth_ / 2 + (c / 16) * 8 + c % 8;
      const int shift = c % 16 < 8 ? 0 : 4;
      for (int64_t i = 0; i < k; ++i) {
        const size_t at = static_cast<size_t>(row * k + i);
        const uint8_t nibble = (w[at / 2] >> (4 * (at % 2))) & 0xF;
        tile[i * tileWidth_ / 2] |= static_cast<uint8_t>(nibble << shift);
      }
      uint16_t *scales = groupScales_.data() + t * groups * tileWidth_ + c;
      for (int64_t g = 0; g < groups; ++g)
        scales[g * tileWidth_] = stored.groupScales[row * groups + g];
    }
  });
}

void PackedLinear::decodeTileRow(int64_t t, int64_t i, float *out) const {
  const size_t at = static_cast<size_t>((t * inputs_ + i) * tileWidth_);
  if (format_ == Format::int4Tiles) {
    decodeInt4(static_cast<const uint8_t *>(data_.get()) + at / 2,
               tileGroupScales(t) + (i / groupSize_) * tileWidth_, tileWidth_, out);
    return;
  }
  if (format_ == Format::bf16Tiles) {
    decodeBf16(static_cast<const uint16_t *>(data_.get()) + at, tileWidth_, out);
    return;
  }
  const float *scales = columnScales_.data() + t * tileWidth_;
  if (format_ == Format::fp8Tiles)
    decodeFp8(static_cast<const uint8_t *>(data_.get()) + at, scales, tileWidth_, out);
  else
    decodeInt8(static_cast<const int8_t *>(data_.get()) + at, scales, tileWidth_, out);
}

const void *PackedLinear::tileData(int64_t t) const {
  const size_t at = static_cast<size_t>(t * inputs_ * tileWidth_);
  if (format_ == Format::int4Tiles)
    return static_cast<const uint8_t *>(data_.get()) + at / 2;
  return static_cast<const uint8_t *>(data_.get()) +
         at * (format_ == Format::bf16Tiles ? sizeof(uint16_t) : 1);
}

void PackedLinear::widenTile(int64_t t, float *out) const {
  for (int64_t i = 0; i < inputs_; ++i)
    decodeTileRow(t, i, out + i * tileWidth_);
}

PackedGemm::PackedGemm() = default;

StatusOr<PackedGemm::Call *> PackedGemm::call(const PackedLinear &w, int64_t rows, int team,
                                              bool accumulate) {
  // The format decides the activations' type; brgemm fixes its thread split when it is made.
  const auto key = std::make_tuple(rows, w.outputs(), w.inputs(), static_cast<int>(w.format()),
                                   team, accumulate);
  auto it = calls_.find(key);
  if (it != calls_.end())
    return &it->second;
  try {
    const Type source = w.format() == PackedLinear::Format::bf16Packed ? Type::bf16 : Type::f32;
    const dnnl::memory::desc x({rows, w.inputs()}, source, Tag::ab),
        y = rowsDesc(rows, w.outputs());
    dnnl::primitive_attr attributes;
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attributes.set_post_ops(sum);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, w.layout(), y), attributes, cpuEngine());
    Call made{dnnl::matmul(pd), dnnl::memory(x, cpuEngine(), DNNL_MEMORY_NONE),
              dnnl::memory(y, cpuEngine(), DNNL_MEMORY_NONE)};
    return &calls_.emplace(key, std::move(made)).first->second;
  } catch (const dnnl::error &e) {
    return Status::error(oneDnnError(e, "making a matmul") + " for " + shapeText(rows, w));
  }
}

Status PackedGemm::run(const PackedLinear &w, const float *x, int64_t rows, const float *bias,
                       float *y, ThreadPool &pool, bool accumulate) {
  if (rows == 0)
    return Status::ok();
  const bool oneDnn = w.format() == PackedLinear::Format::f32Packed ||
                      w.format() == PackedLinear::Format::bf16Packed;
  DLM_RETURN_IF_ERROR(oneDnn ? runOneDnn(w, x, rows, y, pool.threads(), accumulate)
                             : runTiles(w, x, rows, y, pool, accumulate));
  if (bias)
    addBias(bias, rows, w.outputs(), y);
  return Status::ok();
}

Status PackedGemm::runOneDnn(const PackedLinear &w, const float *x, int64_t rows, float *y,
                             int threads, bool accumulate) {
  // Before the primitive is made: oneDNN's brgemm matmul fixes its thread split when it is made.
  const double flops = 2.0 * static_cast<double>(rows) * w.outputs() * w.inputs();
  const int team = flops < kParallelGemmFlops ? 1 : std::max(threads, 1);
  setOneDnnThreads(team);
  if (!stream_) {
    try {
      stream_ = dnnl::stream(cpuEngine());
    } catch (const dnnl::error &e) {
      return Status::error(oneDnnError(e, "making a stream"));
    }
  }
  Call *c = nullptr;
  DLM_ASSIGN_OR_RETURN(c, call(w, rows, team, accumulate));
  void *source = const_cast<float *>(x);
  if (w.format() == PackedLinear::Format::bf16Packed) {
    const size_t count = static_cast<size_t>(rows * w.inputs());
    if (bf16Rows_.size() < count)
      bf16Rows_.resize(count);
    for (size_t i = 0; i < count; ++i)
      bf16Rows_[i] = bf16FromFloat(x[i]);
    source = bf16Rows_.data();
  }
  // The C API: the C++ one takes the arguments as an unordered_map, an allocation per call, and
  // throws.
  dnnl_status_t status = dnnl_memory_set_data_handle(c->x.get(), source);
  if (status == dnnl_success)
    status = dnnl_memory_set_data_handle(c->y.get(), y);
  const dnnl_exec_arg_t arguments[] = {
      {DNNL_ARG_SRC, c->x.get()}, {DNNL_ARG_WEIGHTS, w.memory().get()}, {DNNL_ARG_DST, c->y.get()}};
  if (status == dnnl_success)
    status = dnnl_primitive_execute(c->primitive.get(), stream_.get(), 3, arguments);
  if (status == dnnl_success)
    status = dnnl_stream_wait(stream_.get());
  if (status != dnnl_success)
    return Status::error("oneDNN matmul failed (status " + std::to_string(status) + ") on " +
                         shapeText(rows, w));
  return Status::ok();
}

// y[rows, columns] (+)= a tile's sums [rows, width], times its columns' scales where given.
static void storeTileSums(const float *sums, int64_t width, const float *scales, int64_t rows,
                          float *y, int64_t ldy, int64_t columns, bool accumulate) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t c = 0; c < columns; ++c) {
      const float sum = sums[m * width + c] * (scales ? scales[c] : 1.0f);
      y[m * ldy + c] = accumulate ? y[m * ldy + c] + sum : sum;
    }
}

// y[rows, columns] (+)= x[rows, K] tile t of w, its rows of W^T decoded one at a time into
// `scratch` (at least (rows + 1) * tileWidth floats) beside the rows' sums.
void PackedGemm::multiplySmallRows(const PackedLinear &w, int64_t t, const float *x, int64_t rows,
                                   float *scratch, float *y, int64_t ldy, int64_t columns,
                                   bool accumulate) {
  const int64_t k = w.inputs(), width = w.tileWidth();
  float *sums = scratch, *decoded = scratch + rows * width;
  std::fill(sums, sums + rows * width, 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    w.decodeTileRow(t, i, decoded);
    addScaledRow(decoded, width, x + i, k, rows, sums);
  }
  storeTileSums(sums, width, nullptr, rows, y, ldy, columns, accumulate);
}

// y[rows, columns] (+)= x[rows, K] tile t of w, by the register-blocked kernels: the sums in
// `scratch` (rows * tileWidth floats), then scaled (int8) into y.
void PackedGemm::multiplyBlocked(const PackedLinear &w, int64_t t, const float *x, int64_t rows,
                                 float *scratch, float *y, int64_t ldy, int64_t columns,
                                 bool accumulate) {
  const int64_t k = w.inputs(), width = w.tileWidth();
  const bool int8 = w.format() == PackedLinear::Format::int8Tiles;
  if (w.format() == PackedLinear::Format::int4Tiles)
    multiplyTileInt4(static_cast<const uint8_t *>(w.tileData(t)), w.tileGroupScales(t),
                     w.groupSize(), k, width, x, k, rows, scratch);
  else if (int8)
    multiplyTileInt8(static_cast<const int8_t *>(w.tileData(t)), k, width, x, k, rows, scratch);
  else
    multiplyTileBf16(static_cast<const uint16_t *>(w.tileData(t)), k, width, x, k, rows, scratch);
  storeTileSums(scratch, width, int8 ? w.tileScales(t) : nullptr, rows, y, ldy, columns,
                accumulate);
}

Status PackedGemm::runTiles(const PackedLinear &w, const float *x, int64_t rows, float *y,
                            ThreadPool &pool, bool accumulate) {
  const int64_t k = w.inputs(), width = w.tileWidth(), n = w.outputs();
  if (tileScratch_.size() < static_cast<size_t>(pool.threads()))
    tileScratch_.resize(static_cast<size_t>(pool.threads()));
  // A widened tile, a small-rows tile's sums and decoded row, or the blocked kernels' sums.
  const size_t scratchFloats =
      static_cast<size_t>(std::max({k, kSmallRows + 1, kBlockedRows}) * width);
  const bool blocked = rows <= kBlockedRows && hasBlockedTileKernels() &&
                       (w.format() == PackedLinear::Format::bf16Tiles ||
                        w.format() == PackedLinear::Format::int8Tiles ||
                        w.format() == PackedLinear::Format::int4Tiles);
  for (std::vector<float> &scratch : tileScratch_)
    if (scratch.size() < scratchFloats)
      scratch.resize(scratchFloats);
  const double flops = 2.0 * static_cast<double>(rows) * n * k;
  const bool parallel = flops >= kParallelGemmFlops || w.bytes() >= kParallelTileBytes;
  std::atomic<dnnl_status_t> failure{dnnl_success};
  pool.parallelFor(w.tiles(), parallel ? 2 : w.tiles() + 1,
                   [&](int64_t begin, int64_t end, int thread) {
                     setOneDnnThreads(1);
                     float *tile = tileScratch_[static_cast<size_t>(thread)].data();
                     for (int64_t t = begin; t < end; ++t) {
                       const int64_t first = t * width, columns = std::min(width, n - first);
                       if (blocked) {
                         multiplyBlocked(w, t, x, rows, tile, y + first, n, columns, accumulate);
                         continue;
                       }
                       if (rows <= kSmallRows) {
                         multiplySmallRows(w, t, x, rows, tile, y + first, n, columns, accumulate);
                         continue;
                       }
                       w.widenTile(t, tile);
                       const dnnl_status_t status =
                           dnnl_sgemm('N', 'N', rows, columns, k, 1.0f, x, k, tile, width,
                                      accumulate ? 1.0f : 0.0f, y + first, n);
                       if (status != dnnl_success)
                         failure = status;
                     }
                   });
  if (failure != dnnl_success)
    return Status::error("oneDNN sgemm failed (status " + std::to_string(failure.load()) + ") on " +
                         shapeText(rows, w));
  return Status::ok();
}

} // namespace dlm::cpu
