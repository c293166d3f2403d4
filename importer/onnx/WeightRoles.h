// After raising: which initializer plays which canonical weight ("layers.0.q" ↔
// "model.transformer.blocks.0.q_proj.weight"), read off the structure of the raised @forward —
// the residual stream from the embedding through each layer to the LM head — and checked against
// the description config.json gives (layers, heads, mask kind, vocabulary, signature). Local
// patterns cannot know a weight's role; the position of its op in the transformer does.
#pragma once

#include "importer/model/ModelFamily.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <string>

namespace dlm::importer::onnx {

struct WeightRoles {
  // canonical weight name → initializer name, for every weight the description needs (and no
  // other).
  std::map<std::string, std::string> initializers;
  // A model whose config ties the LM head to the embedding, exported with constant folding: the
  // exporter stored the head's Transpose(embedding) as an initializer of its own. Its values must
  // be the embedding's (the import checks); "" when the head reads the embedding itself.
  std::string tiedHeadCopy;
};

// The roles of `forward`'s initializers. Named errors say which part of the structure or which
// config fact does not match.
StatusOr<WeightRoles> assignWeightRoles(mlir::func::FuncOp forward, const ModelDescription &model);

} // namespace dlm::importer::onnx
