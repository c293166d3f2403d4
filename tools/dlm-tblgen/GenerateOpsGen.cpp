// dlm-tblgen -gen-generate-ops: the `generate` dialect's record ops, as TableGen text, from the
// decode records' declaration (runtime/schema/DecodeOps.td). Each decode record kind without a
// region becomes an SSA op of the same name: a literal parameter stays an attribute of the same
// constraint, an input becomes an operand of its value's type, an output a result, and an
// in-out parameter both (the result named `<key>_out`). A declaration (knob) has its `name` as
// an attribute and gives its value as its result. The structured kinds (block_loop,
// denoise_loop, if), whose SSA form carries values through their regions, are written by hand in
// compiler/dialects/generate/GenerateOps.td, which includes this file.
#include "tools/dlm-tblgen/DecodeRecords.h"

#include "mlir/TableGen/GenInfo.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/TableGenBackend.h"

#include <string>
#include <vector>

namespace {

using llvm::Record;
using llvm::StringRef;
using namespace dlm::tblgen;

std::string quotedList(const std::vector<StringRef> &items) {
  std::string text = "[";
  for (size_t i = 0; i < items.size(); ++i)
    text += (i ? ", \"" : "\"") + items[i].str() + "\"";
  return text + "]";
}

// The argument of a literal parameter: its attribute, confined to its choices.
std::string attributeArgument(const Param &param) {
  const Record *attr = param.spec->getValueAsDef("decodeAttr");
  std::string constraint =
      llvm::formatv("Decode_Choice<{0}, {1}>", attr->getName(),
                    quotedList(param.spec->getValueAsListOfStrings("decodeChoiceList")));
  return param.required() ? constraint : "OptionalAttr<" + constraint + ">";
}

// An operand's or a result's constraint: the parameter's value type. A knob parameter (`defined
// knob=$k`) takes the value of a knob op, whatever its type; the lowering checks that it is one.
std::string valueConstraint(const Param &param) {
  std::string value = param.spec->getValueAsDef("decodeValue")->getName().str();
  if (value == "Decode_Knob")
    value = "AnyType";
  return param.required() ? value : "Optional<" + value + ">";
}

bool hasRegions(const Record &op) { return op.getValueAsDag("regions")->getNumArgs() > 0; }

void emitOp(const Record &op, llvm::raw_ostream &os) {
  const StringRef kind = op.getValueAsString("opName");
  const bool declaration = !op.getValueAsBit("decodeInstruction");
  std::vector<std::string> arguments, results;
  int optionalOperands = 0, optionalResults = 0;
  if (declaration)
    arguments.push_back("StrAttr:$name");
  for (const Param &param : paramsOf(op)) {
    const StringRef role = param.role();
    if (role == "attribute") {
      arguments.push_back(attributeArgument(param) + ":$" + param.argName);
      continue;
    }
    if (role == "input" || role == "inout") {
      arguments.push_back(valueConstraint(param) + ":$" + param.argName);
      optionalOperands += !param.required();
    }
    if (role == "inout" || role == "result") {
      results.push_back(valueConstraint(param) + ":$" + param.argName +
                        (role == "inout" ? "_out" : ""));
      optionalResults += !param.required();
    }
  }
  if (declaration)
    results.push_back("AnyType:$value");
  std::vector<std::string> traits;
  if (optionalOperands > 1)
    traits.push_back("AttrSizedOperandSegments");
  if (optionalResults > 1)
    traits.push_back("AttrSizedResultSegments");
  os << "def Generate_" << camel(kind) << "Op : Generate_RecordOp<\"" << kind << "\", ["
     << llvm::join(traits, ", ") << "]> {\n";
  os << "  let arguments = (ins" << (arguments.empty() ? "" : "\n    ")
     << llvm::join(arguments, ",\n    ") << ");\n";
  os << "  let results = (outs" << (results.empty() ? "" : "\n    ")
     << llvm::join(results, ",\n    ") << ");\n";
  os << "}\n\n";
}

bool emitGenerateOps(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  llvm::emitSourceFileHeader("The generate dialect's record ops (runtime/schema/DecodeOps.td)", os,
                             records);
  std::vector<const Record *> ops = records.getAllDerivedDefinitions("Decode_Op");
  llvm::sort(ops, [](const Record *a, const Record *b) { return a->getID() < b->getID(); });
  for (const Record *op : ops)
    if (!hasRegions(*op))
      emitOp(*op, os);
  return false;
}

const mlir::GenRegistration generateOps("gen-generate-ops",
                                        "The generate dialect's record ops (TableGen)",
                                        emitGenerateOps);

} // namespace
