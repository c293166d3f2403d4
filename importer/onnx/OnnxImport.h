// The ONNX import: model.onnx, with config.json and tokenizer.json beside it (the facts ONNX does
// not carry, laid out as Hugging Face optimum exports them), becomes the same model description,
// weight views and dlm IR as the safetensors import of the checkpoint it was exported from.
//
//   phase 1 (MechanicalImport.h): one op per node, initializers as dlm.weight;
//   phase 2 (Raising.h):          versioned patterns raise subgraphs to dlm ops, no onnx op left;
//   then (WeightRoles.h):         canonical weight ↔ initializer, checked against config.json.
#pragma once

#include "importer/model/Checkpoint.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace dlm::importer::onnx {

// True for a path naming an ONNX file (ends in ".onnx"); dlmc dispatches on it.
bool isOnnxModelPath(const std::string &path);

class OnnxModel {
public:
  OnnxModel();
  ~OnnxModel();
  OnnxModel(const OnnxModel &) = delete;
  OnnxModel &operator=(const OnnxModel &) = delete;

  // Reads and raises `path`. The result has the canonical weights bound to initializer names,
  // no safetensors (`tensors` is empty), and views into this object's initializer bytes (in the
  // protobuf or mapped external data), so this object must outlive it. Named errors: bad or
  // truncated ONNX, missing config.json / tokenizer.json, unsupported opset or node, missing
  // initializer, unrecognised structure, shapes or facts that contradict config.json.
  StatusOr<ImportedCheckpoint> import(mlir::MLIRContext &context, const std::string &path);
  // The raised, verified and canonicalized module of a successful import (then null).
  mlir::OwningOpRef<mlir::ModuleOp> takeModule();

private:
  struct Storage;
  std::unique_ptr<Storage> storage_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
};

// `dlmc import model.onnx --emit=dlm|onnx|folded`: prints the raised module (dlm), the
// mechanical one (onnx) or the mechanical one after ShapeFolding (folded) to `out`, or the error
// to `errors`. Returns the process exit code.
int runImportCommand(const std::string &path, const std::string &emit, llvm::raw_ostream &out,
                     llvm::raw_ostream &errors);

} // namespace dlm::importer::onnx
