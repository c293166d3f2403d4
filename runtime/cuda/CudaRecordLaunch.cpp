// CudaBackend's record launches: each kernel record of a forward onto the stream, through the
// generated table of launchers (one per kind, runtime/schema/KernelOps.td), and the launch,
// norm and GEMM helpers they share. Setup, buffers and the forward entry points are in
// CudaBackend.cpp, graphs in ForwardGraphs.cpp, the device block loop in CudaBackendBlockLoop.cpp.
#include "runtime/cuda/CudaBackend.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/program/RecordProfile.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <variant>

namespace dlm::cuda {

namespace kp = spec::kernels;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

unsigned ceilDiv(int64_t value, int64_t divisor) {
  return static_cast<unsigned>((value + divisor - 1) / divisor);
}

} // namespace

Status CudaBackend::launch(const DeviceKernel &kernel, unsigned gridX, unsigned gridY,
                           unsigned gridZ, void **arguments, const char *what) {
  if (gridX == 0 || gridY == 0 || gridZ == 0)
    return Status::ok();
  return driver_->check(driver_->cuLaunchKernel(kernel.function, gridX, gridY, gridZ,
                                                kernel.blockThreads, 1, 1, 0, stream_, arguments,
                                                nullptr),
                        what);
}

Status CudaBackend::rmsNorm(const DeviceKernel &kernel, CUdeviceptr x, int64_t xStride,
                            CUdeviceptr y, int64_t yStride, CUdeviceptr weight, int64_t rows,
                            int64_t rowsPerToken, double eps, const char *what) {
  long long xTokenStride = xStride, yTokenStride = yStride;
  int rowCount = static_cast<int>(rows), perToken = static_cast<int>(rowsPerToken);
  float epsilon = static_cast<float>(eps);
  void *arguments[] = {&x,      &xTokenStride, &y,        &yTokenStride,
                       &weight, &rowCount,     &perToken, &epsilon};
  return launch(kernel, static_cast<unsigned>(rows), 1, 1, arguments, what);
}

Status CudaBackend::linear(const char *name, CUdeviceptr x, int64_t rows, const BoundRecord &bound,
                           CUdeviceptr y, bool accumulate) {
  const DeviceTensor &weight = *bound.weight;
  const DeviceKernel &widen = bound.widen;
  LinearCall call;
  call.input = element_;
  call.output = element_;
  call.x = x;
  call.weight = weight.data;
  if (bound.fp8Gemm) {
    CUdeviceptr from = x, codes = fp8Rows_, scales = fp8RowScales_;
    long long stride = weight.cols;
    int rowCount = static_cast<int>(rows);
    void *arguments[] = {&from, &stride, &codes, &scales, &rowCount};
    DLM_RETURN_IF_ERROR(
        launch(bound.quantize, static_cast<unsigned>(rows), 1, 1, arguments,
               (std::string(name) + ": quantizing its input rows: cuLaunchKernel").c_str()));
    call.input = DeviceElement::fp8E4m3;
    call.x = codes;
    call.weightScales = weight.scale;
    call.xScales = scales;
  } else if (widen.function) {
    CUdeviceptr from = weight.data, scale = weight.scale, to = widenedWeight_.pointer();
    long long weightRows = weight.rows, weightCols = weight.cols;
    void *arguments[] = {&from, &scale, &to, &weightRows, &weightCols};
    const unsigned perBlock = 4 * widen.blockThreads;
    DLM_RETURN_IF_ERROR(
        launch(widen, ceilDiv(weightRows * weightCols, perBlock), 1, 1, arguments,
               (std::string(name) + ": widening its weight: cuLaunchKernel").c_str()));
    call.weight = to;
  }
  call.bias = bound.bias ? bound.bias->data : 0;
  call.y = y;
  call.rows = rows;
  call.in = weight.cols;
  call.out = weight.rows;
  call.accumulate = accumulate;
  return gemm_->run(stream_, call, name);
}

CUdeviceptr CudaBackend::slot(const program::KernelProgram &program, int64_t index,
                              int64_t count) const {
  const program::SlotPlace &place = program.slots[static_cast<size_t>(index)];
  return activations_ + static_cast<size_t>(place.offset * count) * elementBytes(element_);
}

Status CudaBackend::enqueueForward(const Shape &shape, bool timed) {
  const Function *function = shape.function ? shape.function : default_;
  if (!function)
    return Status::error("cuda backend: internal error: a forward without a function");
  // A forward of the session's sequence (the device block loop's) is a packed run of one part.
  const std::vector<PackedPart> one{
      PackedPart{sequence_, nullptr, ForwardSpan{shape.first, shape.count, shape.keys},
                 sampling::LogitRows{shape.rowsBegin, shape.rowsEnd}, ForwardInput{}}};
  const std::vector<PackedPart> &parts = shape.parts ? *shape.parts : one;
  const program::KernelProgram &program = function->program;
  for (size_t i = 0; i < program.kernels.size(); ++i)
    DLM_RETURN_IF_ERROR(
        timed ? enqueueTimedRecord(program, program.kernels[i], function->bound[i], shape, parts)
              : enqueueRecord(program, program.kernels[i], function->bound[i], shape, parts));
  return Status::ok();
}

Status CudaBackend::enqueueTimedRecord(const program::KernelProgram &program,
                                       const program::ProgramRecord &k, const BoundRecord &bound,
                                       const Shape &shape, const std::vector<PackedPart> &parts) {
  const program::RecordProfile profile = program::recordProfile(program, k);
  // The LM head runs over the requested rows only; over none it enqueues nothing, and (as on the
  // CPU) no event is recorded.
  const int64_t rows = k.kind() == program::KernelKind::lmHead ? logitRowCount(parts) : shape.count;
  if (rows == 0)
    return enqueueRecord(program, k, bound, shape, parts);
  if (profile.normFirst) {
    DLM_RETURN_IF_ERROR(timer_->begin(stream_, program::recordEvent(k, profile, true, rows)));
    DLM_RETURN_IF_ERROR(enqueueProjectionInput(program, k, bound, shape, parts));
    DLM_RETURN_IF_ERROR(timer_->end(stream_));
  }
  DLM_RETURN_IF_ERROR(timer_->begin(stream_, program::recordEvent(k, profile, false, rows)));
  DLM_RETURN_IF_ERROR(profile.normFirst ? enqueueProjectionGemm(program, k, bound, shape, parts)
                                        : enqueueRecord(program, k, bound, shape, parts));
  return timer_->end(stream_);
}

CudaBackend::LayerPages CudaBackend::layerPages(int64_t recordLayer) const {
  // The layer's region is [K|V][page][slot][kvWidth].
  const size_t layer = static_cast<size_t>(std::max<int64_t>(recordLayer, 0));
  const int64_t kvWidth = layer < kvWidths_.size() ? kvWidths_[layer] : 0;
  LayerPages pages;
  pages.slotStride = kvWidth;
  pages.pageStride = pageTokens_ * kvWidth;
  const size_t regionBytes =
      static_cast<size_t>(kvPageCount_ * pages.pageStride) * elementBytes(element_);
  pages.k = kvPool_.pointer() + (layer < kvOffsets_.size() ? kvOffsets_[layer] : 0);
  pages.v = pages.k + regionBytes;
  return pages;
}

// Each kind's launch, in kind order (generated rows).
const CudaBackend::RecordLauncher CudaBackend::kLaunchers[] = {
#define DLM_KERNEL_CUDA_LAUNCHES
#define DLM_KERNEL_HANDLER(kind, member) &CudaBackend::member,
#include "runtime/schema/KernelRecordSpec.inc"
};

Status CudaBackend::enqueueRecord(const program::KernelProgram &program,
                                  const program::ProgramRecord &k, const BoundRecord &bound,
                                  const Shape &shape, const std::vector<PackedPart> &parts) {
  static_assert(std::size(kLaunchers) == std::size(spec::kernels::kKindContracts));
  return (this->*kLaunchers[static_cast<size_t>(k.kind())])(program, k, bound, shape, parts);
}

CudaBackend::RecordRows CudaBackend::rowsOf(const program::KernelProgram &program,
                                            const program::ProgramRecord &k,
                                            const BoundRecord &bound, const Shape &shape) const {
  RecordRows rows;
  rows.count = shape.count;
  rows.tokens = static_cast<int>(shape.count);
  rows.width = k.result >= 0 ? program.slots[static_cast<size_t>(k.result)].width : 0;
  rows.result = k.result >= 0 ? slot(program, k.result, shape.count) : 0;
  for (size_t i = 0; i < k.operands.size() && i < kRowOperands; ++i)
    rows.operands[i] = slot(program, k.operands[i], shape.count);
  rows.what = bound.launchName.c_str();
  return rows;
}

// An out-of-place result of an in-place kernel starts as a copy of its operand.
Status CudaBackend::copyRows(const program::ProgramRecord &k, CUdeviceptr to, CUdeviceptr from,
                             int64_t elements) {
  if (to == from)
    return Status::ok();
  return driver_->check(
      driver_->cuMemcpyDtoDAsync(to, from, static_cast<size_t>(elements) * elementBytes(element_),
                                 stream_),
      (k.fullName + ": cuMemcpyDtoDAsync").c_str());
}

Status CudaBackend::bindDeclaredLaunch(const program::KernelProgram &program,
                                       const program::ProgramRecord &record, BoundRecord &bound) {
  const std::string *arguments = bound.kernel.text(kp::kLaunchArguments),
                    *grid = bound.kernel.text(kp::kLaunchGrid);
  if (!arguments || !grid)
    return Status::error("its kernel declares no launch");
  DLM_ASSIGN_OR_RETURN(kp::DeclaredLaunch launch, kp::parseDeclaredLaunch(*arguments, *grid));
  bound.gridX = launch.x;
  bound.gridY = launch.y;
  // A slot the launch reads lives in the workspace (the token ids and positions are `tokens`
  // and `positions`, not operands).
  auto inWorkspace = [&](int64_t slot) {
    return slot >= 0 && program.slots[static_cast<size_t>(slot)].offset >= 0;
  };
  for (kp::LaunchArgument &argument : launch.arguments) {
    BoundRecord::DeclaredArgument declared;
    declared.argument = argument;
    const bool operand = argument.source == kp::ArgumentSource::operand ||
                         argument.source == kp::ArgumentSource::operandStride;
    const bool result = argument.source == kp::ArgumentSource::result ||
                        argument.source == kp::ArgumentSource::resultStride;
    if (operand && (argument.operand >= static_cast<int64_t>(record.operands.size()) ||
                    !inWorkspace(record.operands[static_cast<size_t>(argument.operand)])))
      return Status::error("its kernel reads operand " + str(argument.operand) +
                           ", which is not one of the record's rows");
    if (result && !inWorkspace(record.result))
      return Status::error("its kernel writes a result the record has not");
    if (!argument.parameter.empty())
      DLM_RETURN_IF_ERROR(bindParameter(record, declared));
    bound.declared.push_back(std::move(declared));
  }
  return Status::ok();
}

// The record's parameter a declared argument names: a weight (its name, for the upload), a real
// or an integer.
Status CudaBackend::bindParameter(const program::ProgramRecord &record,
                                  BoundRecord::DeclaredArgument &declared) {
  const kp::LaunchArgument &argument = declared.argument;
  const bool wantsWeight = argument.source == kp::ArgumentSource::weight ||
                           argument.source == kp::ArgumentSource::weightRows;
  bool bound = false;
  std::visit(
      [&](const auto &params) {
        params.forEachField([&](std::string_view name, const auto &value) {
          using Value = std::decay_t<decltype(value)>;
          if (name != argument.parameter)
            return;
          if constexpr (std::is_same_v<Value, kp::WeightRef>) {
            bound = wantsWeight && value;
            declared.weightName = value.name;
          } else if constexpr (std::is_same_v<Value, double>) {
            bound = argument.source == kp::ArgumentSource::real;
            declared.real = value;
          } else if constexpr (std::is_same_v<Value, int64_t>) {
            bound = argument.source == kp::ArgumentSource::integer;
            declared.integer = value;
          }
        });
      },
      record.params);
  if (!bound)
    return Status::error("its kernel reads parameter '" + argument.parameter +
                         "', which the record has not as a " +
                         (wantsWeight                                   ? "weight"
                          : argument.source == kp::ArgumentSource::real ? "real"
                                                                        : "integer"));
  return Status::ok();
}

// The launch the record's kernel declares: each argument from the record's slots, weights and
// parameters and the forward's rows, over the declared grid.
Status CudaBackend::enqueueDeclared(const program::KernelProgram &program,
                                    const program::ProgramRecord &k, const BoundRecord &bound,
                                    const Shape &shape, const std::vector<PackedPart> &) {
  union Value {
    CUdeviceptr pointer;
    long long wide;
    int narrow;
    float real;
  };
  constexpr size_t kMaxArguments = 24;
  Value values[kMaxArguments];
  void *arguments[kMaxArguments];
  if (bound.declared.size() > kMaxArguments)
    return Status::error(k.fullName + ": a kernel of more than " + str(kMaxArguments) +
                         " arguments");
  auto widthOf = [&](int64_t s) { return program.slots[static_cast<size_t>(s)].width; };
  for (size_t i = 0; i < bound.declared.size(); ++i) {
    const BoundRecord::DeclaredArgument &declared = bound.declared[i];
    const kp::LaunchArgument &argument = declared.argument;
    Value &value = values[i];
    switch (argument.source) {
    case kp::ArgumentSource::operand:
      value.pointer = slot(program, k.operands[static_cast<size_t>(argument.operand)], shape.count);
      break;
    case kp::ArgumentSource::operandStride:
      value.wide = widthOf(k.operands[static_cast<size_t>(argument.operand)]);
      break;
    case kp::ArgumentSource::result:
      value.pointer = slot(program, k.result, shape.count);
      break;
    case kp::ArgumentSource::resultStride:
      value.wide = widthOf(k.result);
      break;
    case kp::ArgumentSource::rows:
      value.narrow = static_cast<int>(shape.count);
      break;
    case kp::ArgumentSource::tokens:
      value.pointer = shape.inputs;
      break;
    case kp::ArgumentSource::positions:
      value.pointer = shape.inputs + static_cast<size_t>(inputLayout().positions) * sizeof(int32_t);
      break;
    case kp::ArgumentSource::weight:
      value.pointer = declared.weight->data;
      break;
    case kp::ArgumentSource::weightRows:
      value.wide = declared.weight->rows;
      break;
    case kp::ArgumentSource::real:
      value.real = static_cast<float>(declared.real);
      break;
    case kp::ArgumentSource::integer:
      value.narrow = static_cast<int>(declared.integer);
      break;
    }
    arguments[i] = &value;
  }
  auto extent = [&](const kp::GridDimension &d) {
    return static_cast<unsigned>(d.rows ? shape.count : d.count);
  };
  return launch(bound.kernel, extent(bound.gridX), extent(bound.gridY), 1, arguments,
                bound.launchName.c_str());
}

// Staged on the host at the device precision, zero rows included (uploadInputRows).
Status CudaBackend::enqueueForwardInput(const program::KernelProgram &program,
                                        const program::ProgramRecord &k, const BoundRecord &bound,
                                        const Shape &shape, const std::vector<PackedPart> &) {
  const RecordRows rows = rowsOf(program, k, bound, shape);
  return copyRows(k, rows.result, inputRows_, rows.count * rows.width);
}

// Operand i's rows to block i of the capture buffer, laid side by side on the host.
Status CudaBackend::enqueueCapture(const program::KernelProgram &program,
                                   const program::ProgramRecord &k, const BoundRecord &,
                                   const Shape &shape, const std::vector<PackedPart> &) {
  const int64_t w = program.slots[static_cast<size_t>(k.operands[0])].width;
  for (size_t i = 0; i < k.operands.size(); ++i) {
    const CUdeviceptr to =
        captureRows_ +
        static_cast<size_t>(static_cast<int64_t>(i) * shape.count * w) * elementBytes(element_);
    DLM_RETURN_IF_ERROR(
        copyRows(k, to, slot(program, k.operands[i], shape.count), shape.count * w));
  }
  return Status::ok();
}

// A group shorter than the row normalises each head of the row (q/k norm).
Status CudaBackend::enqueueRmsNorm(const program::KernelProgram &program,
                                   const program::ProgramRecord &k, const BoundRecord &bound,
                                   const Shape &shape, const std::vector<PackedPart> &) {
  const RecordRows rows = rowsOf(program, k, bound, shape);
  const int64_t width = rows.width, n = k.normWidth;
  return rmsNorm(bound.kernel, rows.operands[0], width, rows.result, width,
                 bound.weight ? bound.weight->data : 0, rows.count * (width / n), width / n,
                 k.as<kp::RmsNormParams>().eps, rows.what);
}

// linear, norm_linear, lm_head: enqueueProjectionInput, then enqueueProjectionGemm.
Status CudaBackend::enqueueProjection(const program::KernelProgram &program,
                                      const program::ProgramRecord &k, const BoundRecord &bound,
                                      const Shape &shape, const std::vector<PackedPart> &parts) {
  DLM_RETURN_IF_ERROR(enqueueProjectionInput(program, k, bound, shape, parts));
  return enqueueProjectionGemm(program, k, bound, shape, parts);
}

Status CudaBackend::enqueueRope(const program::KernelProgram &program,
                                const program::ProgramRecord &k, const BoundRecord &bound,
                                const Shape &shape, const std::vector<PackedPart> &) {
  RecordRows rows = rowsOf(program, k, bound, shape);
  CUdeviceptr x = rows.result;
  DLM_RETURN_IF_ERROR(copyRows(k, x, rows.operands[0], rows.count * rows.width));
  long long tokenStride = rows.width;
  int headCount = static_cast<int>(rows.width / k.as<kp::RopeParams>().headDim);
  CUdeviceptr positions =
      shape.inputs + static_cast<size_t>(inputLayout().positions) * sizeof(int32_t);
  void *arguments[] = {&x, &tokenStride, &headCount, &rows.tokens, &positions};
  return launch(bound.kernel, static_cast<unsigned>(rows.count), 1, 1, arguments, rows.what);
}

Status CudaBackend::enqueueProjectionInput(const program::KernelProgram &program,
                                           const program::ProgramRecord &k,
                                           const BoundRecord &bound, const Shape &shape,
                                           const std::vector<PackedPart> &parts) {
  if (k.kind() == program::KernelKind::lmHead)
    return enqueueHeadInput(program, k, bound, shape, parts);
  if (k.kind() != program::KernelKind::normLinear || k.reusesNorm)
    return Status::ok();
  const int64_t n = program.slots[static_cast<size_t>(k.operands[0])].width;
  const std::string what = k.fullName + ": cuLaunchKernel";
  return rmsNorm(bound.kernel, slot(program, k.operands[0], shape.count), n, normed_, n,
                 bound.norm->data, shape.count, 1, k.as<kp::NormLinearParams>().eps, what.c_str());
}

Status CudaBackend::enqueueProjectionGemm(const program::KernelProgram &program,
                                          const program::ProgramRecord &k, const BoundRecord &bound,
                                          const Shape &shape,
                                          const std::vector<PackedPart> &parts) {
  if (k.kind() == program::KernelKind::lmHead)
    return enqueueHeadGemm(program, k, bound, shape, parts);
  const int64_t count = shape.count;
  const CUdeviceptr x =
      k.kind() == program::KernelKind::normLinear ? normed_ : slot(program, k.operands[0], count);
  const CUdeviceptr y = slot(program, k.result, count);
  // The folded residual add: cuBLASLt's C == D with beta = 1, in place on the residual (an
  // out-of-place result starts as a copy of it).
  const CUdeviceptr residual = k.accumulates() ? slot(program, k.operands[1], count) : y;
  if (residual != y) {
    const int64_t width = program.slots[static_cast<size_t>(k.result)].width;
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoDAsync(
            y, residual, static_cast<size_t>(count * width) * elementBytes(element_), stream_),
        (k.fullName + ": cuMemcpyDtoDAsync").c_str()));
  }
  return linear(k.fullName.c_str(), x, count, bound, y, k.accumulates());
}

// Records that read a part's own input rows or block table, launched once per part over its
// rows of the packed activations.
Status CudaBackend::enqueuePerPart(const program::KernelProgram &program,
                                   const program::ProgramRecord &k, const BoundRecord &bound,
                                   const Shape &shape, const std::vector<PackedPart> &parts) {
  using program::KernelKind;
  const std::vector<int64_t> &in = k.operands;
  auto widthOf = [&](int64_t s) { return program.slots[static_cast<size_t>(s)].width; };
  // kv_store has no result slot (-1): its rows' width comes from its operands.
  const int64_t width = k.result >= 0 ? widthOf(k.result) : 0;
  const size_t e = elementBytes(element_);
  const std::string what = k.fullName + ": cuLaunchKernel";
  const LayerPages pages = layerPages(k.layer);
  const CUdeviceptr blockTables =
      shape.inputs + static_cast<size_t>(inputLayout().blockTables) * sizeof(int32_t);
  // Row `offset` of value slot `s`, at `rowWidth` elements a row.
  auto rowOf = [&](int64_t s, int64_t offset, int64_t rowWidth) {
    return slot(program, s, shape.count) + static_cast<size_t>(offset * rowWidth) * e;
  };
  size_t inputAt = 0; // bytes of the previous parts' soft-embedding input rows
  for (size_t p = 0; p < parts.size(); ++p) {
    const PackedPart &part = parts[p];
    const int64_t count = part.span.count;
    int tokens = static_cast<int>(count);
    if (k.kind() == KernelKind::softEmbedding) {
      // The part's input rows (uploaded before the graph), or none: zero rows; the fed rows
      // before the input's first are zero rows too.
      const int64_t first = part.input.rows ? part.input.first : 0, row = part.offset + first;
      CUdeviceptr input = part.input.rows ? inputRows_ + inputAt : 0, table = bound.weight->data,
                  out = rowOf(k.result, row, width);
      if (first > 0)
        DLM_RETURN_IF_ERROR(driver_->check(
            driver_->cuMemsetD8Async(rowOf(k.result, part.offset, width), 0,
                                     static_cast<size_t>(first * width) * e, stream_),
            (k.fullName + ": cuMemsetD8Async").c_str()));
      long long inputStride = part.input.rows ? part.input.width : 0, outStride = width;
      int inputWidth = static_cast<int>(inputStride), rows = static_cast<int>(count - first);
      const auto &params = k.as<kp::SoftEmbeddingParams>();
      float scale = static_cast<float>(params.scale);
      CUdeviceptr partTokens = shape.inputs + static_cast<size_t>(row) * sizeof(int32_t),
                  inputScale = shape.inputs +
                               static_cast<size_t>(inputLayout().inputScales + p) * sizeof(int32_t);
      int maskToken = static_cast<int>(params.maskToken.value_or(-1));
      void *arguments[] = {&input,      &inputStride, &inputWidth, &rows, &table,    &scale,
                           &partTokens, &maskToken,   &inputScale, &out,  &outStride};
      if (rows > 0)
        DLM_RETURN_IF_ERROR(launch(bound.kernel, ceilDiv(width, 128), ceilDiv(rows, 64), 1,
                                   arguments, what.c_str()));
      inputAt += static_cast<size_t>(partInputFloats(part)) * sizeof(float);
    } else if (k.kind() == KernelKind::selectInputRows) {
      // Two whole-row copies; planned in place on a (or b), that part stays where it is.
      const int64_t split = std::min(part.input.rows ? part.input.count : 0, count);
      const size_t rowBytes = static_cast<size_t>(width) * e;
      const CUdeviceptr a = rowOf(in[0], part.offset, width), b = rowOf(in[1], part.offset, width),
                        out = rowOf(k.result, part.offset, width);
      auto copy = [&](CUdeviceptr to, CUdeviceptr from, int64_t rows) -> Status {
        if (to == from || rows == 0)
          return Status::ok();
        return driver_->check(
            driver_->cuMemcpyDtoDAsync(to, from, static_cast<size_t>(rows) * rowBytes, stream_),
            (k.fullName + ": cuMemcpyDtoDAsync").c_str());
      };
      DLM_RETURN_IF_ERROR(copy(out, a, split));
      const size_t skipped = static_cast<size_t>(split) * rowBytes;
      DLM_RETURN_IF_ERROR(copy(out + skipped, b + skipped, count - split));
    } else {
      // kv_store: K and V are views with the K rows' stride (one fused projection output).
      const int64_t rowStride = widthOf(in[0]);
      CUdeviceptr kArg = rowOf(in[0], part.offset, rowStride),
                  vArg = rowOf(in[1], part.offset, rowStride),
                  tableArg = blockTables + static_cast<size_t>(p * tablePages_) * sizeof(int32_t),
                  kPages = pages.k, vPages = pages.v;
      long long rowStrideArg = rowStride, pageStride = pages.pageStride,
                slotStride = pages.slotStride;
      int firstSlot = static_cast<int>(part.span.first);
      void *arguments[] = {&kArg,      &vArg,   &rowStrideArg, &tokens,     &tableArg,
                           &firstSlot, &kPages, &vPages,       &pageStride, &slotStride};
      DLM_RETURN_IF_ERROR(
          launch(bound.kernel, static_cast<unsigned>(count), 1, 1, arguments, what.c_str()));
    }
  }
  return Status::ok();
}

// One launch for every part: grid z is the part (the kernel's request), each with its query
// rows (queryStarts), key length, block table and anchor; a part's rows map to the same blocks
// as in a forward of that part alone.
Status CudaBackend::enqueueAttention(const program::KernelProgram &program,
                                     const program::ProgramRecord &k, const BoundRecord &bound,
                                     const Shape &shape, const std::vector<PackedPart> &parts) {
  auto widthOf = [&](int64_t s) { return program.slots[static_cast<size_t>(s)].width; };
  const InputLayout layout = inputLayout();
  auto input = [&](int64_t at) { return shape.inputs + static_cast<size_t>(at) * sizeof(int32_t); };
  const LayerPages pages = layerPages(k.layer);
  CUdeviceptr qArg = slot(program, k.operands[0], shape.count),
              startsArg = input(layout.queryStarts), positionArg = input(layout.positions),
              lengthArg = input(layout.kvLengths), causalFlags = 0,
              outArg = slot(program, k.result, shape.count), tableArg = input(layout.blockTables),
              kPages = pages.k, vPages = pages.v;
  long long qStride = widthOf(k.operands[0]), outStride = widthOf(k.result),
            pageStride = pages.pageStride, slotStride = pages.slotStride;
  int maxPages = static_cast<int>(tablePages_);
  const auto &params = k.as<kp::AttentionParams>();
  int window = static_cast<int>(params.window.value_or(0)),
      blockSize = static_cast<int>(params.blockSize.value_or(1));
  float scale = static_cast<float>(params.scale);
  void *arguments[] = {&qArg,     &qStride,   &kPages,    &vPages,      &pageStride, &slotStride,
                       &tableArg, &maxPages,  &startsArg, &positionArg, &lengthArg,  &causalFlags,
                       &window,   &blockSize, &scale,     &outArg,      &outStride};
  int64_t longest = 0;
  for (const PackedPart &part : parts)
    longest = std::max(longest, part.span.count);
  const int64_t group = params.heads / params.kvHeads;
  const int64_t rowsPerBlock =
      (bound.kernel.blockThreads / 32) * bound.kernel.integer("rows_per_warp", 1);
  return launch(bound.kernel, ceilDiv(longest * group, rowsPerBlock),
                static_cast<unsigned>(params.kvHeads), static_cast<unsigned>(parts.size()),
                arguments, (k.fullName + ": cuLaunchKernel").c_str());
}

Status CudaBackend::enqueueMoe(const program::KernelProgram &program,
                               const program::ProgramRecord &k, const BoundRecord &bound,
                               const Shape &shape, const std::vector<PackedPart> &) {
  const std::string what = k.fullName + ": cuLaunchKernel";
  int tokens = static_cast<int>(shape.count);
  const int64_t hidden = program.slots[static_cast<size_t>(k.result)].width;
  CUdeviceptr r = slot(program, k.operands[0], shape.count),
              x = slot(program, k.operands[1], shape.count),
              y = slot(program, k.result, shape.count);
  // The scales are optional: a null pointer reads as ones.
  auto data = [](const DeviceTensor *tensor) { return tensor ? tensor->data : CUdeviceptr(0); };
  CUdeviceptr router = data(bound.moe.router), routerScale = data(bound.moe.routerScale),
              expertScale = data(bound.moe.expertScale), expertBias = data(bound.moe.expertBias),
              gateUp = data(bound.moe.gateUp), down = data(bound.moe.down);
  CUdeviceptr choice = moeChoice_, weight = moeWeight_, lists = moeLists_, counts = moeCounts_,
              act = moeAct_, out = moeOut_;
  long long rowStride = hidden;
  const auto &params = k.as<kp::MoeParams>();
  float eps = static_cast<float>(params.eps),
        inputScale = static_cast<float>(params.routerInputScale),
        routedScale = static_cast<float>(params.routedScale);
  // Routing: each token's experts and weights; then each expert's slots.
  void *route[] = {&r,          &rowStride, &tokens,     &router,      &routerScale, &expertScale,
                   &expertBias, &eps,       &inputScale, &routedScale, &choice,      &weight};
  DLM_RETURN_IF_ERROR(
      launch(bound.moeRoute, static_cast<unsigned>(tokens), 1, 1, route, what.c_str()));
  void *plan[] = {&choice, &tokens, &lists, &counts};
  DLM_RETURN_IF_ERROR(launch(bound.moePlan, 1, 1, 1, plan, what.c_str()));
  // The grouped expert products, sized for an expert that every token chose.
  const unsigned rowBlocks = ceilDiv(shape.count, 64),
                 experts = static_cast<unsigned>(params.experts);
  void *gated[] = {&x, &rowStride, &gateUp, &tokens, &lists, &counts, &act};
  DLM_RETURN_IF_ERROR(
      launch(bound.moeGateUp, ceilDiv(k.expertWidth, 64), rowBlocks, experts, gated, what.c_str()));
  long long actStride = k.expertWidth;
  void *projected[] = {&act, &actStride, &down, &tokens, &lists, &counts, &out};
  DLM_RETURN_IF_ERROR(
      launch(bound.moeDown, ceilDiv(hidden, 64), rowBlocks, experts, projected, what.c_str()));
  long long yStride = hidden;
  void *combine[] = {&choice, &weight, &out, &tokens, &y, &yStride};
  return launch(bound.moeCombine, static_cast<unsigned>(tokens), 1, 1, combine, what.c_str());
}

int64_t CudaBackend::logitRowCount(const std::vector<PackedPart> &parts) {
  int64_t n = 0;
  for (const PackedPart &part : parts)
    n += part.rows.count();
  return n;
}

Status CudaBackend::enqueueHeadInput(const program::KernelProgram &program,
                                     const program::ProgramRecord &k, const BoundRecord &bound,
                                     const Shape &shape, const std::vector<PackedPart> &parts) {
  const int64_t hidden = program.slots[static_cast<size_t>(k.operands[0])].width;
  const size_t rowBytes = static_cast<size_t>(hidden) * elementBytes(element_);
  const CUdeviceptr x = slot(program, k.operands[0], shape.count);
  auto row = [&](CUdeviceptr base, int64_t r) { return base + static_cast<size_t>(r) * rowBytes; };
  // Each part's rows, after the previous parts' (their logit offsets). Dream's logit shift
  // predicts row r at fed row r - 1 and row 0 keeps its own, so rows [b, e) read [b-1, e-1)
  // (b > 0) or row 0 then rows [0, e-1). Normalised straight into the head's input rows, or
  // copied there without a norm.
  auto stage = [&](int64_t from, int64_t to, int64_t rows) -> Status {
    if (rows == 0)
      return Status::ok();
    if (bound.norm)
      return rmsNorm(bound.kernel, row(x, from), hidden, row(headInput_, to), hidden,
                     bound.norm->data, rows, 1, *k.as<kp::LmHeadParams>().eps,
                     (k.fullName + ": norm").c_str());
    return driver_->check(driver_->cuMemcpyDtoDAsync(row(headInput_, to), row(x, from),
                                                     static_cast<size_t>(rows) * rowBytes, stream_),
                          (k.fullName + ": cuMemcpyDtoDAsync").c_str());
  };
  for (const PackedPart &part : parts) {
    const int64_t rows = part.rows.count(), at = part.logitOffset, first = part.offset;
    if (rows == 0)
      continue;
    if (!k.as<kp::LmHeadParams>().logitShift) {
      DLM_RETURN_IF_ERROR(stage(first + part.rows.begin, at, rows));
    } else if (part.rows.begin > 0) {
      DLM_RETURN_IF_ERROR(stage(first + part.rows.begin - 1, at, rows));
    } else {
      DLM_RETURN_IF_ERROR(stage(first, at, 1));
      DLM_RETURN_IF_ERROR(stage(first, at + 1, rows - 1));
    }
  }
  return Status::ok();
}

Status CudaBackend::enqueueHeadGemm(const program::KernelProgram &program,
                                    const program::ProgramRecord &k, const BoundRecord &bound,
                                    const Shape &, const std::vector<PackedPart> &parts) {
  const int64_t n = logitRowCount(parts);
  if (n == 0)
    return Status::ok();
  const int64_t hidden = program.slots[static_cast<size_t>(k.operands[0])].width;
  // Only the first vocabSize rows of the head (a padded embedding's extra rows are never
  // logits), written as float32 whatever the precision.
  LinearCall call;
  call.input = element_;
  call.output = DeviceElement::f32;
  call.x = headInput_;
  call.weight = bound.weight->data;
  call.y = logits_;
  call.rows = n;
  call.in = hidden;
  call.out = program.slots[static_cast<size_t>(k.result)].width;
  DLM_RETURN_IF_ERROR(gemm_->run(stream_, call, k.fullName.c_str()));
  if (!k.as<kp::LmHeadParams>().softcap)
    return Status::ok();
  CUdeviceptr logits = logits_;
  long long values = n * call.out;
  void *arguments[] = {&logits, &values};
  return launch(bound.softcap, ceilDiv(values, 4 * bound.softcap.blockThreads), 1, 1, arguments,
                (k.fullName + ": soft-cap: cuLaunchKernel").c_str());
}

} // namespace dlm::cuda
