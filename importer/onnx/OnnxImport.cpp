#include "importer/onnx/OnnxImport.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "importer/ir/ForwardBuilder.h"
#include "importer/model/CanonicalWeights.h"
#include "importer/onnx/MechanicalImport.h"
#include "importer/onnx/OnnxFile.h"
#include "importer/onnx/Raising.h"
#include "importer/onnx/ShapeFolding.h"
#include "importer/onnx/WeightRoles.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "support/JsonText.h"
#include "support/TextFile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h" // ONNX_API, then onnx-ml.pb.h under ONNX_ML

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>

namespace dlm::importer::onnx {
namespace {

using namespace mlir;
namespace ir = dlm::ir;

// Phase 1 creates unregistered ops; the context allows them only while the import runs.
class UnregisteredOpsAllowed {
public:
  explicit UnregisteredOpsAllowed(MLIRContext &context)
      : context_(context), before_(context.allowsUnregisteredDialects()) {
    context.allowUnregisteredDialects(true);
  }
  ~UnregisteredOpsAllowed() { context_.allowUnregisteredDialects(before_); }

private:
  MLIRContext &context_;
  bool before_;
};

// config.json and tokenizer.json beside model.onnx: the description the safetensors import
// would make of the same model.
Status readCompanions(const std::string &directory, ModelDescription &model,
                      std::string &tokenizerJson) {
  std::filesystem::path dir(directory);
  std::string context = "onnx: '" + directory + "'";
  auto configText = readTextFile(dir / "config.json");
  if (!configText)
    return Status::error("onnx: cannot read " + (dir / "config.json").string() +
                         " (ONNX does not carry the architecture, vocabulary or special "
                         "tokens; put the model's config.json beside model.onnx)");
  StatusOr<nlohmann::json> config = parseJsonText(*configText, "config.json");
  if (!config)
    return config.status().withContext(context);
  auto description = describeModel(*config);
  if (!description)
    return description.status().withContext(context);
  model = std::move(*description);

  auto tokenizerText = readTextFile(dir / "tokenizer.json");
  if (!tokenizerText)
    return Status::error("onnx: cannot read " + (dir / "tokenizer.json").string() +
                         " (put the model's tokenizer.json beside model.onnx)");
  auto tokenizer = Tokenizer::fromJson(*tokenizerText);
  if (!tokenizer)
    return tokenizer.status().withContext(context + ": tokenizer.json");
  tokenizerJson = std::move(*tokenizerText);
  return Status::ok();
}

// Every activation has one row per token, so a row count is the length of the token ids. The
// head-splitting patterns take tensor.dim of whatever they reshape; this rewrites each such
// dim to the one of the function argument the rows come from, as the safetensors import
// builds it, so later passes see a single symbolic length.
void reifyRowCounts(func::FuncOp forward) {
  auto rowSource = [](Value v) -> Value {
    Operation *op = v.getDefiningOp();
    if (!op)
      return Value();
    return llvm::TypeSwitch<Operation *, Value>(op)
        .Case([](ir::EmbeddingOp o) { return o.getIds(); })
        .Case<ir::LinearOp, ir::RMSNormOp, ir::RoPEOp, ir::GatedMLPOp, ir::LMHeadOp>(
            [](auto o) { return o.getInput(); })
        .Case([](ir::MaskedAttentionOp o) { return o.getQuery(); })
        .Case([](arith::AddFOp o) { return o.getLhs(); })
        .Case<tensor::ExpandShapeOp, tensor::CollapseShapeOp>([](auto o) {
          return o.getReassociationIndices().front().size() == 1 ? o.getSrc() : Value();
        })
        .Default([](Operation *) { return Value(); });
  };
  Block &entry = forward.getBody().front();
  std::map<unsigned, Value> lengths;
  forward.walk([&](tensor::DimOp dim) {
    if (dim.getConstantIndex() != std::optional<int64_t>(0))
      return;
    Value source = dim.getSource();
    while (Value next = rowSource(source))
      source = next;
    auto arg = dyn_cast<BlockArgument>(source);
    if (!arg || arg.getOwner() != &entry || source == dim.getSource())
      return;
    Value &length = lengths[arg.getArgNumber()];
    if (!length) {
      OpBuilder b = OpBuilder::atBlockBegin(&entry);
      length = tensor::DimOp::create(b, dim.getLoc(), arg, 0);
    }
    dim.replaceAllUsesWith(length);
  });
}

// The module attributes the safetensors import sets (target facts, config), taken from the module
// ForwardBuilder makes of the same description so that the two imports cannot drift apart.
void describeModule(ModuleOp module, const ModelDescription &model) {
  std::vector<Type> weightTypes(model.weights.size(), Float32Type::get(module.getContext()));
  OwningOpRef<ModuleOp> reference = buildForwardModule(*module.getContext(), model, weightTypes);
  for (NamedAttribute attr : module->getAttrs())
    if (attr.getName().strref().starts_with("onnx."))
      module->removeAttr(attr.getName());
  for (NamedAttribute attr : (*reference)->getAttrs())
    module->setAttr(attr.getName(), attr.getValue());
}

// The raised @forward as dlm IR proper: result types from the raised ops, no ONNX bookkeeping,
// verified and canonicalized (dead weights such as RoPE tables go away).
Status finishModule(ModuleOp module, func::FuncOp forward, const ModelDescription &model) {
  Block &entry = forward.getBody().front();
  forward.setType(FunctionType::get(forward.getContext(), entry.getArgumentTypes(),
                                    entry.getTerminator()->getOperandTypes()));
  forward.removeArgAttrsAttr();
  forward.removeResAttrsAttr();
  reifyRowCounts(forward);
  describeModule(module, model);

  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
    os << d.getLocation() << ": " << d << "\n";
    return success();
  });
  PassManager pm(module.getContext());
  pm.addPass(createCanonicalizerPass());
  if (failed(verify(module)) || failed(pm.run(module)))
    return Status::error("onnx: internal error: the raised IR does not verify:\n" + diagnostics);
  return Status::ok();
}

// The initializers that weight ops read transposed (kTransposedWeightAttr). One read both ways
// is refused: the artifact stores one tensor per initializer.
StatusOr<std::set<std::string>> transposedInitializers(func::FuncOp forward) {
  std::set<std::string> transposed, plain;
  forward.walk([&](ir::WeightOp w) {
    (w->hasAttr(kTransposedWeightAttr) ? transposed : plain).insert(w.getName().str());
  });
  for (const std::string &name : transposed)
    if (plain.count(name))
      return Status::error("onnx: not supported yet: initializer '" + name +
                           "' is read both as a linear layer's transposed weight and as it is");
  return transposed;
}

// Elements of `element` bytes, [in, out] at `from`, as [out, in] at `to`, in 64 x 64 tiles (a
// strided pass over a whole matrix misses the cache on every write).
template <typename Element>
void transposeMatrix(const uint8_t *from, uint8_t *to, size_t in, size_t out) {
  constexpr size_t kTile = 64;
  auto *source = reinterpret_cast<const Element *>(from);
  auto *target = reinterpret_cast<Element *>(to);
  for (size_t i0 = 0; i0 < in; i0 += kTile)
    for (size_t o0 = 0; o0 < out; o0 += kTile)
      for (size_t i = i0; i < std::min(in, i0 + kTile); ++i)
        for (size_t o = o0; o < std::min(out, o0 + kTile); ++o)
          std::memcpy(target + o * in + i, source + i * out + o, sizeof(Element));
}

// `bytes` ([in, out], as the exporter folded Wᵀ) as W [out, in], into `owned`.
TensorBytes transposedBytes(const TensorBytes &bytes, std::vector<uint8_t> &owned) {
  const size_t in = static_cast<size_t>(bytes.shape[0]), out = static_cast<size_t>(bytes.shape[1]);
  const size_t element = in * out ? bytes.size / (in * out) : 0;
  owned.resize(bytes.size);
  if (element == 4)
    transposeMatrix<uint32_t>(bytes.data, owned.data(), in, out);
  else if (element == 2)
    transposeMatrix<uint16_t>(bytes.data, owned.data(), in, out);
  else
    for (size_t i = 0; i < in; ++i)
      for (size_t o = 0; o < out; ++o)
        std::memcpy(owned.data() + (o * in + i) * element, bytes.data + (i * out + o) * element,
                    element);
  TensorBytes result = bytes;
  result.shape = {bytes.shape[1], bytes.shape[0]};
  result.data = owned.data();
  return result;
}

// The LM head reads the embedding's weight op instead of `copy`'s (a tied model's folded copy,
// its bytes already checked to be the embedding's).
Status useEmbeddingForHead(func::FuncOp forward, const std::string &copy,
                           const std::string &embedding) {
  Value table;
  SmallVector<ir::WeightOp> copies;
  forward.walk([&](ir::WeightOp w) {
    if (w.getName() == embedding && !w->hasAttr(kTransposedWeightAttr))
      table = w.getResult();
    else if (w.getName() == copy)
      copies.push_back(w);
  });
  for (ir::WeightOp w : copies) {
    if (!table || w.getType() != table.getType())
      return Status::error("onnx: internal error: the LM head's copy '" + copy +
                           "' of the embedding '" + embedding + "' cannot be replaced by it");
    w.getResult().replaceAllUsesWith(table);
    w->erase();
  }
  return Status::ok();
}

safetensors::DType viewDType(int32_t dataType) {
  switch (dataType) {
  case ::onnx::TensorProto::FLOAT16:
    return safetensors::DType::F16;
  case ::onnx::TensorProto::BFLOAT16:
    return safetensors::DType::BF16;
  default:
    return safetensors::DType::F32;
  }
}

} // namespace

bool isOnnxModelPath(const std::string &path) {
  return llvm::StringRef(path).ends_with(".onnx");
}

struct OnnxModel::Storage {
  std::unique_ptr<OnnxFile> file;
  std::deque<safetensors::TensorView> views; // stable addresses for ImportedCheckpoint::views
  std::deque<std::vector<uint8_t>> transposed; // weights the exporter stored transposed
};

OnnxModel::OnnxModel() = default;
OnnxModel::~OnnxModel() = default;

OwningOpRef<ModuleOp> OnnxModel::takeModule() { return std::move(module_); }

StatusOr<ImportedCheckpoint> OnnxModel::import(MLIRContext &context, const std::string &path) {
  auto file = OnnxFile::open(path);
  if (!file)
    return file.status();
  ImportedCheckpoint result;
  result.directory = (*file)->directory();
  DLM_RETURN_IF_ERROR(readCompanions(result.directory, result.model, result.tokenizerJson));
  auto chat = readCheckpointChat(result.directory);
  if (!chat)
    return chat.status().withContext("onnx: '" + result.directory + "'");
  result.chat = std::move(*chat);

  context.loadDialect<ir::DlmDialect, func::FuncDialect, arith::ArithDialect,
                      tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module;
  {
    UnregisteredOpsAllowed allowed(context);
    auto translated = translateGraph(context, **file);
    if (!translated)
      return translated.status();
    module = std::move(*translated);
    auto forward = cast<func::FuncOp>(module->getBody()->front());
    DLM_RETURN_IF_ERROR(checkOpset(**file)); // before folding reads ops of another opset
    DLM_RETURN_IF_ERROR(foldShapes(forward, **file, result.model, result.recognised));
    DLM_RETURN_IF_ERROR(raiseGraph(forward, **file, result.model, result.recognised));
  }
  auto forward = cast<func::FuncOp>(module->getBody()->front());
  DLM_RETURN_IF_ERROR(finishModule(*module, forward, result.model));
  auto roles = assignWeightRoles(forward, result.model);
  if (!roles)
    return roles.status();
  auto transposed = transposedInitializers(forward);
  if (!transposed)
    return transposed.status();

  auto storage = std::make_unique<Storage>();
  // An initializer's bytes as the model uses them (transposed back where the exporter folded a
  // transpose into it).
  auto read = [&](const std::string &name,
                  std::vector<uint8_t> &transposedCopy) -> StatusOr<TensorBytes> {
    auto bytes = (*file)->bytes(*(*file)->initializer(name));
    if (bytes && transposed->count(name) && bytes->shape.size() == 2)
      bytes = transposedBytes(*bytes, transposedCopy);
    return bytes;
  };
  if (!roles->tiedHeadCopy.empty()) {
    const std::string &embedding = roles->initializers.at(std::string(spec::kEmbed));
    std::vector<uint8_t> headCopy, tableCopy; // only for the comparison
    auto head = read(roles->tiedHeadCopy, headCopy);
    auto table = read(embedding, tableCopy);
    if (!head)
      return head.status();
    if (!table)
      return table.status();
    if (head->shape != table->shape || head->dataType != table->dataType ||
        std::memcmp(head->data, table->data, head->size) != 0)
      return Status::error("onnx: initializer '" + roles->tiedHeadCopy +
                           "' is the LM head, which config.json ties to the embedding, but it "
                           "is not a copy of the embedding '" +
                           embedding + "'");
    DLM_RETURN_IF_ERROR(useEmbeddingForHead(forward, roles->tiedHeadCopy, embedding));
  }
  std::map<std::string, int> bindingsLeft; // per initializer, the weights still to bind to it
  for (const WeightBinding &binding : result.model.weights)
    ++bindingsLeft[roles->initializers[binding.canonicalName]];
  for (WeightBinding &binding : result.model.weights) {
    binding.checkpointName = roles->initializers[binding.canonicalName];
    const ::onnx::TensorProto *tensor = (*file)->initializer(binding.checkpointName);
    auto bytes = read(binding.checkpointName, storage->transposed.emplace_back());
    if (!bytes)
      return bytes.status();
    std::string where = tensor->data_location() == ::onnx::TensorProto::EXTERNAL
                            ? "external data of " + path
                            : path;
    storage->views.push_back({binding.checkpointName, viewDType(bytes->dataType),
                              bytes->shape, bytes->data, bytes->size, where});
    result.views.push_back(&storage->views.back());
    // The view of a transposed weight points at the import's copy: the protobuf's own bytes of
    // it are not read again once its last binding is made (kept, they would double the weights'
    // memory until the compile ends).
    if (transposed->count(binding.checkpointName) && --bindingsLeft[binding.checkpointName] == 0)
      (*file)->releaseBytes(binding.checkpointName);
  }
  storage->file = std::move(*file);
  storage_ = std::move(storage);
  module_ = std::move(module);
  return std::move(result);
}

namespace {

// The graph before raising: the mechanical form, or (`folded`) after ShapeFolding.
StatusOr<OwningOpRef<ModuleOp>> graphBeforeRaising(MLIRContext &context, const std::string &path,
                                                   bool folded) {
  auto file = OnnxFile::open(path);
  if (!file)
    return file.status();
  auto translated = translateGraph(context, **file);
  if (!translated || !folded)
    return translated;
  ImportedCheckpoint companions;
  DLM_RETURN_IF_ERROR(
      readCompanions((*file)->directory(), companions.model, companions.tokenizerJson));
  auto forward = cast<func::FuncOp>((*translated)->getBody()->front());
  DLM_RETURN_IF_ERROR(checkOpset(**file));
  DLM_RETURN_IF_ERROR(foldShapes(forward, **file, companions.model, companions.recognised));
  return translated;
}

} // namespace

int runImportCommand(const std::string &path, const std::string &emit, llvm::raw_ostream &out,
                     llvm::raw_ostream &errors) {
  if (emit != "dlm" && emit != "onnx" && emit != "folded") {
    errors << "dlmc import: unknown --emit=" << emit << " (expected: dlm, onnx or folded)\n";
    return 2;
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  if (emit != "dlm") {
    // The forms before raising keep their unregistered ops, so printing (which verifies) needs
    // them.
    context.allowUnregisteredDialects(true);
    auto graph = graphBeforeRaising(context, path, emit == "folded");
    if (!graph) {
      errors << "dlmc import: " << graph.status().message() << "\n";
      return 1;
    }
    (*graph)->print(out);
    out << "\n";
    return 0;
  }
  OnnxModel model;
  auto checkpoint = model.import(context, path);
  if (!checkpoint) {
    errors << "dlmc import: " << checkpoint.status().message() << "\n";
    return 1;
  }
  model.takeModule()->print(out);
  out << "\n";
  if (!checkpoint->recognised.empty())
    errors << "dlmc import: recognised: " << llvm::join(checkpoint->recognised, "; ") << "\n";
  return 0;
}

} // namespace dlm::importer::onnx
