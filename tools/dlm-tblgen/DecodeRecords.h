// What dlm-tblgen's generators read of runtime/schema/DecodeOps.td: each decode op's parameters
// in declaration order, and the spellings derived from a kind's name.
#pragma once

#include "llvm/ADT/StringExtras.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <string>
#include <vector>

namespace dlm::tblgen {

// "top_k" → "TopK", "f32" → "F32".
inline std::string camel(llvm::StringRef text) {
  return llvm::convertToCamelFromSnakeCase(text, /*capitalizeFirst=*/true);
}

// "SeqExtend" → "seq_extend".
inline std::string snake(llvm::StringRef text) { return llvm::convertToSnakeFromCamelCase(text); }

struct Param {
  std::string key;     // the records' key: "default"
  std::string argName; // the op argument's name: "default_" (a C++ keyword gets an underscore)
  const llvm::Record *spec;

  llvm::StringRef role() const { return spec->getValueAsString("decodeRole"); }
  bool required() const { return spec->getValueAsBit("decodeRequired"); }
};

inline std::vector<Param> paramsOf(const llvm::Record &op) {
  std::vector<Param> params;
  const llvm::DagInit *arguments = op.getValueAsDag("arguments");
  for (unsigned i = 0; i < arguments->getNumArgs(); ++i) {
    const auto *def = llvm::dyn_cast<llvm::DefInit>(arguments->getArg(i));
    if (!def || !def->getDef()->isSubClassOf("Decode_Param"))
      llvm::PrintFatalError(&op, "argument " + std::to_string(i) +
                                     " is not a decode parameter (Param, In, InOut, Out)");
    std::string argName = arguments->getArgNameStr(i).str();
    std::string key = argName;
    if (!key.empty() && key.back() == '_')
      key.pop_back();
    params.push_back({key, argName, def->getDef()});
  }
  return params;
}

} // namespace dlm::tblgen
