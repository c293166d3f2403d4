// dlm-tblgen -gen-decode-record-spec: the runtime's tables of the decode records
// (runtime/program/DecodeProgramSpec.h) from their declaration, runtime/schema/DecodeOps.td.
// For each kind: its name, its parameter table ({key, role, type, required, choices} in the
// order of the op's arguments), the positions of its parameters and of their choices; then the
// list of kinds, the requirements, and the interpreter's OpKind enum in declaration order (the
// runtime relies on ranges of it: the scalar records, the binary ones). Kinds that share a table
// (`paramTable`) share its names.
#include "tools/dlm-tblgen/DecodeRecords.h"

#include "mlir/TableGen/GenInfo.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"
#include "llvm/TableGen/TableGenBackend.h"

#include <set>
#include <string>
#include <vector>

namespace {

using llvm::Record;
using llvm::StringRef;
using namespace dlm::tblgen;

// The table's C++ name stem: the shared one, or the kind's.
std::string tableName(const Record &op) {
  StringRef shared = op.getValueAsString("paramTable");
  return shared.empty() ? camel(op.getValueAsString("opName")) : shared.str();
}

void emitTable(const Record &op, llvm::raw_ostream &os) {
  const std::string name = tableName(op);
  os << "inline constexpr ParamSpec k" << name << "Params[] = {\n";
  for (const Param &param : paramsOf(op)) {
    os << llvm::formatv("    {{\"{0}\", PR::{1}, PT::{2}, {3}", param.key,
                        param.spec->getValueAsString("decodeRole"),
                        param.spec->getValueAsString("decodeType"),
                        param.spec->getValueAsBit("decodeRequired") ? "true" : "false");
    StringRef choices = param.spec->getValueAsString("decodeChoices");
    if (!choices.empty())
      os << ", \"" << choices << "\"";
    os << "},\n";
  }
  os << "};\n";
}

void emitPositions(const Record &op, llvm::raw_ostream &os) {
  const std::string name = tableName(op);
  os << "namespace " << snake(name) << "_params {\n";
  const std::vector<Param> params = paramsOf(op);
  for (size_t i = 0; i < params.size(); ++i) {
    StringRef cppName = params[i].spec->getValueAsString("cppName");
    os << "inline constexpr size_t k" << (cppName.empty() ? camel(params[i].key) : cppName.str())
       << " = " << i << ";\n";
    llvm::SmallVector<StringRef> choices;
    params[i].spec->getValueAsString("decodeChoices").split(choices, ',', -1, false);
    for (size_t c = 0; c < choices.size(); ++c)
      os << "inline constexpr int k" << camel(params[i].key) << camel(choices[c]) << " = " << c
         << ";\n";
  }
  os << "} // namespace " << snake(name) << "_params\n\n";
}

// The kinds the interpreter runs (ops but declarations, and the markers), in declaration order.
std::vector<const Record *> instructions(const llvm::RecordKeeper &records) {
  std::vector<const Record *> kinds;
  for (const Record *op : records.getAllDerivedDefinitions("Decode_Op"))
    if (op->getValueAsBit("decodeInstruction"))
      kinds.push_back(op);
  for (const Record *marker : records.getAllDerivedDefinitions("DecodeMarker"))
    kinds.push_back(marker);
  llvm::sort(kinds, [](const Record *a, const Record *b) { return a->getID() < b->getID(); });
  return kinds;
}

StringRef kindOf(const Record &kind) {
  return kind.isSubClassOf("DecodeMarker") ? kind.getValueAsString("decodeKind")
                                           : kind.getValueAsString("opName");
}

// The OpKind enumerator: `cppKind`, or the kind in lower camel case ("seq_extend" → seqExtend).
std::string enumeratorOf(const Record &kind) {
  StringRef cpp = kind.getValueAsString("cppKind");
  return cpp.empty() ? llvm::convertToCamelFromSnakeCase(kindOf(kind)) : cpp.str();
}

void emitOpKinds(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  const std::vector<const Record *> kinds = instructions(records);
  os << "// ---- Instructions: the kinds the interpreter runs, in declaration order ----\n";
  os << "enum class OpKind : uint8_t {\n";
  for (const Record *kind : kinds)
    os << "  " << enumeratorOf(*kind) << ",\n";
  os << "};\n\n";
  os << "inline constexpr OpKindName kOpKinds[] = {\n";
  for (const Record *kind : kinds)
    os << "    {kKind" << camel(kindOf(*kind)) << ", OpKind::" << enumeratorOf(*kind) << "},\n";
  os << "};\n\n";
}

bool emitDecodeRecordSpec(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  llvm::emitSourceFileHeader("The decode records' tables (runtime/schema/DecodeOps.td)", os,
                             records);
  const std::vector<const Record *> ops = records.getAllDerivedDefinitions("Decode_Op");
  const std::vector<const Record *> markers = records.getAllDerivedDefinitions("DecodeMarker");

  os << "// ---- Kinds ----\n";
  for (const Record *op : ops) {
    StringRef kind = op->getValueAsString("opName");
    os << "inline constexpr std::string_view kKind" << camel(kind) << " = \"" << kind << "\";\n";
  }
  for (const Record *marker : markers) {
    StringRef kind = marker->getValueAsString("decodeKind");
    os << "inline constexpr std::string_view kKind" << camel(kind) << " = \"" << kind << "\";\n";
  }

  os << "\n// ---- Parameters of each kind ----\n// clang-format off\n";
  std::set<std::string> tables;
  for (const Record *op : ops)
    if (tables.insert(tableName(*op)).second)
      emitTable(*op, os);
  os << "// clang-format on\n\n";

  os << "inline constexpr KindSpec kKinds[] = {\n";
  for (const Record *op : ops)
    os << "    kindSpec(kKind" << camel(op->getValueAsString("opName")) << ", k"
       << tableName(*op) << "Params),\n";
  for (const Record *marker : markers)
    os << "    {kKind" << camel(marker->getValueAsString("decodeKind")) << ", nullptr, 0},\n";
  os << "};\n\n";

  os << "inline constexpr Requirement kRequirements[] = {\n";
  for (const Record *op : ops)
    for (const Record *needs : op->getValueAsListOfDefs("requirements"))
      os << llvm::formatv("    {{kKind{0}, \"{1}\", \"{2}\", \"{3}\"},\n",
                          camel(op->getValueAsString("opName")),
                          needs->getValueAsString("decodeWhen"),
                          needs->getValueAsString("decodeValue"),
                          needs->getValueAsString("decodeNeeds"));
  os << "};\n\n";

  emitOpKinds(records, os);

  os << "// ---- Positions: a loaded record keeps one operand per parameter, in its table's\n"
        "// order; a literal's choice is kept as its index ----\n";
  tables.clear();
  for (const Record *op : ops)
    if (tables.insert(tableName(*op)).second)
      emitPositions(*op, os);
  return false;
}

const mlir::GenRegistration
    decodeRecordSpec("gen-decode-record-spec",
                     "The runtime's decode record tables (DecodeProgramSpec.h)",
                     emitDecodeRecordSpec);

} // namespace
