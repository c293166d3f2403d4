// What dlm-tblgen's kernel generators read of runtime/schema/KernelOps.td: the kinds in
// declaration order, each kind's parameters, and the C++ spellings derived from their names.
#pragma once

#include "tools/dlm-tblgen/DecodeRecords.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <map>
#include <string>
#include <vector>

namespace dlm::tblgen {

struct KernelParameter {
  std::string name;
  const llvm::Record *value; // a KernelValue
  bool required;
  std::string defaultExpression; // an optional one's default (C++, $name for another); may be ""
};

inline std::vector<KernelParameter> parametersOf(const llvm::Record &kind) {
  std::vector<KernelParameter> parameters;
  const llvm::DagInit *dag = kind.getValueAsDag("parameters");
  for (unsigned i = 0; i < dag->getNumArgs(); ++i) {
    const auto *def = llvm::dyn_cast<llvm::DefInit>(dag->getArg(i));
    if (!def || !def->getDef()->isSubClassOf("KernelParameter") || dag->getArgNameStr(i).empty())
      llvm::PrintFatalError(&kind, "parameter " + std::to_string(i) +
                                       " is not a named Required<...> or Optional<...>");
    const llvm::Record *parameter = def->getDef();
    parameters.push_back({dag->getArgNameStr(i).str(), parameter->getValueAsDef("parameterValue"),
                          parameter->getValueAsBit("required"),
                          parameter->getValueAsString("defaultExpression").str()});
  }
  return parameters;
}

inline std::vector<const llvm::Record *> kindsOf(const llvm::RecordKeeper &records) {
  std::vector<const llvm::Record *> kinds = records.getAllDerivedDefinitions("KernelKind");
  llvm::sort(kinds,
             [](const llvm::Record *a, const llvm::Record *b) { return a->getID() < b->getID(); });
  return kinds;
}

// The kind's KernelKind enumerator: "rms_norm" → "rmsNorm" unless the .td gives cppKind.
inline std::string enumeratorOf(const llvm::Record &kind) {
  llvm::StringRef cpp = kind.getValueAsString("cppKind");
  return cpp.empty() ? llvm::convertToCamelFromSnakeCase(kind.getValueAsString("name")) : cpp.str();
}

// Each parameter name's C++ constant ("top_k" → "kTopK"; ParameterConstant where it would
// collide with a kind's).
class Constants {
public:
  explicit Constants(const llvm::RecordKeeper &records) {
    for (const llvm::Record *rename : records.getAllDerivedDefinitions("ParameterConstant"))
      renamed_[rename->getValueAsString("name").str()] = rename->getValueAsString("constant").str();
  }
  std::string of(const std::string &parameter) const {
    auto it = renamed_.find(parameter);
    return "k" + (it == renamed_.end() ? camel(parameter) : it->second);
  }

private:
  std::map<std::string, std::string> renamed_;
};

} // namespace dlm::tblgen
