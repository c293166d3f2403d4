// dlmc inspect: what an artifact holds — config, policy and knobs, weights, kernels per target.
#include "tools/dlmc/Commands.h"
#include "tools/dlmc/RecordListing.h"

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/model/KernelProgram.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <optional>
#include <string_view>
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

} // namespace

int runInspect(const std::string &artifactPath, bool verify) {
  auto reader = artifact::ArtifactReader::open(artifactPath);
  if (!reader) {
    llvm::errs() << "dlmc inspect: " << reader.status().message() << "\n";
    return 1;
  }
  if (verify) {
    // Before the listing, so that a damaged artifact fails at once and says only why.
    if (Status verified = reader->verifyIntegrity(); !verified) {
      llvm::errs() << "dlmc inspect: " << verified.message() << "\n";
      return 1;
    }
    llvm::outs() << "integrity: the metadata and " << reader->weights().size()
                 << " weights match the XXH3-64 hashes dlmc recorded\n";
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
  if (std::optional<std::string_view> chatTemplate = reader->chatTemplate())
    os << "chat template: " << chatTemplate->size() << " bytes\n";
  else
    os << "chat template: none\n";
  if (!reader->chatSpecialTokens().empty()) {
    os << "chat special tokens:";
    for (const auto &[name, value] : reader->chatSpecialTokens())
      os << " " << name << "=" << artifact::attributeValueText(value);
    os << "\n";
  }
  os << "policy: " << reader->program().policy << "\n";
  printAttributes(os, reader->program().knobs);
  os << "program: " << reader->program().mlir.size() << " bytes of dlm IR\n";
  printDecodeProgramSummary(os, reader->decodePrograms());
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
      printKernelRecords(os, target);
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
