// dlmc inspect: what an artifact holds — config, policy and knobs, weights, kernels per target.
#include "tools/dlmc/Commands.h"

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/model/KernelProgram.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <variant>

namespace dlm::dlmc {
namespace {

void printAttributes(llvm::raw_ostream &os, const artifact::Attributes &attributes) {
  for (const auto &[name, value] : attributes) {
    os << "  " << name << " = ";
    std::visit(
        [&](const auto &v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>)
            os << (v ? "true" : "false");
          else if constexpr (std::is_same_v<T, std::string>)
            os << '"' << v << '"';
          else
            os << v;
        },
        value);
    os << "\n";
  }
}

// One line per kernel launch, in program order:
//   7  layers.0.q_proj  norm_linear (2) -> 3 @0+128  weight=layers.0.q norm_weight=... eps=1e-05
// "(operands) -> result @offset+width" are value slots and their place in the per-token-row plan.
void printCpuRecords(llvm::raw_ostream &os, const artifact::KernelTarget &target) {
  namespace kp = spec::kernels;
  int64_t rowElements = 0;
  for (size_t index = 0; index < target.kernels.size(); ++index) {
    const artifact::Kernel &k = target.kernels[index];
    auto text = [&](std::string_view key) {
      auto it = k.parameters.find(key);
      return it == k.parameters.end() ? std::string() : artifact::attributeValueText(it->second);
    };
    os << "  " << llvm::format_decimal(index, 3) << "  " << k.name << "  " << k.kind << " ("
       << text(kp::kOperands) << ")";
    if (!text(kp::kResult).empty()) {
      os << " -> " << text(kp::kResult);
      if (!text(kp::kOffset).empty()) {
        os << " @" << text(kp::kOffset) << "+" << text(kp::kWidth);
        auto offset = k.parameters.find(kp::kOffset), width = k.parameters.find(kp::kWidth);
        if (std::holds_alternative<int64_t>(offset->second) && width != k.parameters.end() &&
            std::holds_alternative<int64_t>(width->second))
          rowElements = std::max(rowElements, std::get<int64_t>(offset->second) +
                                                  std::get<int64_t>(width->second));
      } else {
        os << " (output, width " << text(kp::kWidth) << ")";
      }
    }
    for (const auto &[key, value] : k.parameters) {
      if (key == kp::kOperands || key == kp::kResult || key == kp::kOffset || key == kp::kWidth ||
          key == kp::kLayer)
        continue;
      os << "  " << key << "=" << artifact::attributeValueText(value);
    }
    os << "\n";
  }
  os << "  workspace: " << rowElements << " floats per token\n";
}

} // namespace

int runInspect(const std::string &artifactPath) {
  auto reader = artifact::ArtifactReader::open(artifactPath);
  if (!reader) {
    llvm::errs() << "dlmc inspect: " << reader.status().message() << "\n";
    return 1;
  }
  llvm::raw_ostream &os = llvm::outs();
  const artifact::ModelConfig &c = reader->config();
  os << "artifact " << artifactPath << " (" << reader->fileSize() << " bytes, schema "
     << reader->schemaVersion().major << "." << reader->schemaVersion().minor << ", by "
     << reader->producer() << ")\n";
  os << "model: " << c.architecture << "\n"
     << "  vocab " << c.vocabSize << " (embedding rows " << c.embeddingSize << "), hidden "
     << c.hiddenSize << ", layers " << c.numLayers << ", heads " << c.numHeads << " (kv "
     << c.numKvHeads << ", head dim " << c.headDim << "), mlp " << c.intermediateSize << "\n"
     << "  rope theta " << c.ropeTheta << ", rms eps " << c.rmsNormEps << ", mask token "
     << c.maskTokenId << ", max positions " << c.maxPositions
     << (c.tiedEmbeddings ? ", tied embeddings" : "") << "\n";
  printAttributes(os, c.extra);
  os << "tokenizer: " << reader->tokenizerJson().size() << " bytes of tokenizer.json\n";
  os << "policy: " << reader->program().policy << "\n";
  printAttributes(os, reader->program().knobs);
  os << "program: " << reader->program().mlir.size() << " bytes of dlm IR\n";
  uint64_t weightBytes = 0;
  for (const artifact::WeightView &w : reader->weights())
    weightBytes += w.size;
  os << "weights: " << reader->weights().size() << " tensors, " << weightBytes << " bytes\n";
  for (const artifact::WeightView &w : reader->weights())
    os << "  " << w.name << "  " << artifact::dtypeName(w.dtype) << " " << w.shape.toString()
       << "  @" << w.fileOffset << "\n";
  if (reader->kernelTargets().empty())
    os << "kernels: none (the cpu backend needs the cpu records: recompile with dlmc compile)\n";
  for (const artifact::KernelTarget &target : reader->kernelTargets()) {
    os << "kernels for " << target.target << ": " << target.kernels.size() << "\n";
    if (target.target == spec::kernels::kTarget) {
      printCpuRecords(os, target);
      continue;
    }
    for (const artifact::Kernel &k : target.kernels)
      os << "  " << k.name << " (" << k.kind << ") registers " << k.resources.registers
         << ", spills " << k.resources.spillStoreBytes << "/" << k.resources.spillLoadBytes
         << " B, stack " << k.resources.stackBytes << " B, shared " << k.resources.sharedMemoryBytes
         << " B\n";
  }
  return 0;
}

} // namespace dlm::dlmc
