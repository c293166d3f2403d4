// model.onnx as `dlmc import model.onnx` and `dlmc compile` read it: the bytes as the model in a
// directory beside the tiny llada's config.json and tokenizer.json (fuzz/fixtures/tiny_llada,
// the checkpoint make_seeds.py exports the seed from), then the whole ONNX import: protobuf,
// mechanical translation, raising, weight roles and the initializers' bytes. When
// DLM_FUZZ_ONNX_DATA names a directory (fuzz/run-corpus sets it to make_seeds.py's onnx-data),
// its files are copied beside the input first: the weights.bin that the graph-only seed keeps its
// initializers in, so a small input still goes the whole way.
#include "fuzz/FuzzSupport.h"
#include "importer/onnx/OnnxImport.h"

#include "mlir/IR/MLIRContext.h"

namespace {

const std::filesystem::path &directory() { return dlm::fuzz::scratchDirectory("onnx"); }

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  for (const char *file : {"config.json", "tokenizer.json"})
    dlm::fuzz::writeFile(directory() / file,
                         dlm::fuzz::readFixture(std::string("fuzz/fixtures/tiny_llada/") + file));
  if (const char *data = std::getenv("DLM_FUZZ_ONNX_DATA"))
    for (const auto &entry : std::filesystem::directory_iterator(data))
      std::filesystem::copy_file(entry.path(), directory() / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::filesystem::path model = directory() / "model.onnx";
  if (!dlm::fuzz::writeFile(model, dlm::fuzz::asText(data, size)))
    return 0;
  // A context per input, as dlmc has per file: nothing one input leaves behind (interned types,
  // loaded dialects) can change how the next one goes. No thread pool: nothing here is parallel.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  dlm::importer::onnx::OnnxModel onnxModel;
  dlm::fuzz::succeeded("OnnxModel::import", onnxModel.import(context, model.string()));
  return 0;
}
