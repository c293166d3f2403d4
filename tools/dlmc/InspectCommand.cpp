// dlmc inspect: what an artifact holds — config, policy and knobs, weights (and where they live),
// kernels per target — or what a parameter file holds.
#include "tools/dlmc/Commands.h"
#include "tools/dlmc/RecordListing.h"

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/artifact/ParameterFileReader.h"
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

// "  name  dtype [shape]  @offset" per weight (the offset in the file that holds it).
void printWeightList(llvm::raw_ostream &os, const std::vector<artifact::WeightView> &weights) {
  for (const artifact::WeightView &w : weights)
    os << "  " << w.name << "  " << artifact::dtypeName(w.dtype) << " " << w.shape.toString()
       << "  @" << w.fileOffset << "\n";
}

uint64_t totalBytes(const std::vector<artifact::WeightView> &weights) {
  uint64_t bytes = 0;
  for (const artifact::WeightView &w : weights)
    bytes += w.size;
  return bytes;
}

// Where an artifact's weights live: in it, or in the parameter file it names (and whether that is
// still the file dlmc compiled against, or one rewritten since that holds the same weights).
void printWeightLocation(llvm::raw_ostream &os, const artifact::ArtifactReader &reader) {
  os << "weights: " << reader.weights().size() << " tensors, " << totalBytes(reader.weights())
     << " bytes, ";
  const artifact::ParameterFileReader *file = reader.parameterFile();
  if (!file) {
    os << "embedded\n";
    return;
  }
  const artifact::ParameterFileRecordView record = *reader.parameterFileRecord();
  os << "in parameter file " << file->path() << " (" << file->fileSize() << " bytes, recorded as '"
     << record.path << "')\n";
  if (file->metadataHash() == record.metadataHash)
    os << "  the parameter file dlmc compiled this artifact against\n";
  else
    os << "  rewritten since this artifact was compiled (metadata hash "
       << artifact::hexHash(file->metadataHash()) << ", dlmc recorded "
       << artifact::hexHash(record.metadataHash) << "); it holds the same weights\n";
  if (std::optional<uint64_t> seed = reader.randomWeightSeed())
    os << "  random (seed " << *seed << "): outputs mean nothing, timings do\n";
}

int inspectParameterFile(const std::string &path, bool verify) {
  auto file = artifact::ParameterFileReader::open(path);
  if (!file) {
    llvm::errs() << "dlmc inspect: " << file.status().message() << "\n";
    return 1;
  }
  if (verify) {
    if (Status verified = file->verifyIntegrity(); !verified) {
      llvm::errs() << "dlmc inspect: " << verified.message() << "\n";
      return 1;
    }
    llvm::outs() << "integrity: the metadata and " << file->weights().size()
                 << " weights match the XXH3-64 hashes dlmc recorded\n";
  }
  llvm::raw_ostream &os = llvm::outs();
  os << "parameter file " << path << " (" << file->fileSize() << " bytes, schema "
     << file->schemaVersion().major << "." << file->schemaVersion().minor << ", by "
     << file->producer() << ")\n";
  os << "weights: " << file->weights().size() << " tensors, " << totalBytes(file->weights())
     << " bytes";
  if (file->randomSeed() >= 0)
    os << ", random (seed " << file->randomSeed() << ")";
  os << "\n";
  printWeightList(os, file->weights());
  return 0;
}

// What --verify checked, in one line.
void printIntegrity(llvm::raw_ostream &os, const artifact::ArtifactReader &reader) {
  os << "integrity: the metadata and " << reader.weights().size() << " weights";
  if (const artifact::ParameterFileReader *file = reader.parameterFile())
    os << " (in parameter file " << file->path() << ", its metadata and "
       << file->weights().size() << " weights)";
  os << " match the XXH3-64 hashes dlmc recorded\n";
}

} // namespace

int runInspect(const std::string &artifactPath, bool verify) {
  if (artifact::hasParameterFileIdentifier(artifactPath))
    return inspectParameterFile(artifactPath, verify);
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
    printIntegrity(llvm::outs(), *reader);
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
  os << "  stop tokens (eos):";
  for (int64_t id : c.eosTokenIds)
    os << " " << id;
  os << (c.eosTokenIds.empty() ? " none\n" : "\n");
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
  printWeightLocation(os, *reader);
  printWeightList(os, reader->weights());
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
