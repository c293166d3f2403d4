// dlm-tblgen -gen-kernel-params: each kernel kind's typed parameters
// (runtime/model/KernelParams.h includes them) from runtime/schema/KernelOps.td. For every kind,
// in declaration order: a struct <Kind>Params with one member per parameter (integer int64_t,
// real double, flag bool, text std::string, weight WeightRef, slots std::vector<int64_t>, a
// choice an enum class with its nameOf), an optional parameter's default applied, or a
// std::optional where the .td gives none; its forEachWeight and forEachField (name, value); and
// readParams, which parses a record's parameters into it. Then KernelParams, a std::variant of
// the structs in kind order, and kParamsReaders, the reader of each kind.
#include "tools/dlm-tblgen/KernelRecords.h"

#include "mlir/TableGen/GenInfo.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/TableGenBackend.h"

#include <set>
#include <string>
#include <vector>

namespace {

using llvm::Record;
using llvm::StringRef;
using namespace dlm::tblgen;

std::string memberOf(StringRef parameter) { return llvm::convertToCamelFromSnakeCase(parameter); }

std::string structOf(const Record &kind) { return camel(kind.getValueAsString("name")) + "Params"; }

bool isChoice(const KernelParameter &p) {
  return !p.value->getValueAsListOfStrings("choices").empty();
}

// The enum class of a choice parameter: "AttentionMask" for attention's mask.
std::string choiceEnumOf(const Record &kind, const KernelParameter &p) {
  return camel(kind.getValueAsString("name")) + camel(p.name);
}

std::string valueTypeOf(const Record &kind, const KernelParameter &p) {
  if (isChoice(p))
    return choiceEnumOf(kind, p);
  const StringRef type = p.value->getValueAsString("kernelType");
  if (type == "integer")
    return "int64_t";
  if (type == "real")
    return "double";
  if (type == "flag")
    return "bool";
  if (type == "weight")
    return "WeightRef";
  if (type == "slots")
    return "std::vector<int64_t>";
  return "std::string";
}

// An optional parameter without a default is a std::optional, except a weight (an absent
// WeightRef has no name).
bool heldAsOptional(const KernelParameter &p) {
  const StringRef type = p.value->getValueAsString("kernelType");
  return !p.required && p.defaultExpression.empty() && type != "weight";
}

bool isScalar(const KernelParameter &p) {
  const StringRef type = p.value->getValueAsString("kernelType");
  return !isChoice(p) && type != "weight" && type != "slots";
}

// What the generated code could not hold: a parameter named like the structs' `kind`, a default
// on anything but a scalar, an optional choice or slots without one (no std::optional reader),
// and a choice that is no C++ identifier in lower snake case.
void checkDeclaration(const Record &kind, const KernelParameter &p) {
  auto fail = [&](const std::string &what) {
    llvm::PrintFatalError(&kind, "parameter '" + p.name + "': " + what);
  };
  if (p.name == "kind")
    fail("'kind' is the structs' own member");
  if (!p.defaultExpression.empty() && !isScalar(p))
    fail("only an integer, real, flag or text parameter has a default");
  if (!p.required && p.defaultExpression.empty() && !isScalar(p) &&
      p.value->getValueAsString("kernelType") != "weight")
    fail("an optional choice or slots parameter needs a default");
  for (StringRef choice : p.value->getValueAsListOfStrings("choices"))
    if (choice.empty() || !llvm::isLower(choice.front()) || !llvm::all_of(choice, [](char c) {
          return llvm::isLower(c) || llvm::isDigit(c) || c == '_';
        }))
      fail("choice '" + choice.str() + "' is not a lower snake case identifier");
}

// The default with each $name replaced by the member of that parameter, which must come before.
std::string defaultOf(const Record &kind, const KernelParameter &p,
                      const std::set<std::string> &earlier) {
  std::string result;
  StringRef rest = p.defaultExpression;
  while (!rest.empty()) {
    const size_t dollar = rest.find('$');
    result += rest.substr(0, dollar).str();
    if (dollar == StringRef::npos)
      break;
    rest = rest.substr(dollar + 1);
    const size_t end = rest.find_if_not([](char c) { return llvm::isAlnum(c) || c == '_'; });
    const std::string name = rest.substr(0, end).str();
    if (!earlier.count(name))
      llvm::PrintFatalError(&kind, "the default of '" + p.name + "' reads '" + name +
                                       "', which is not a scalar parameter declared before it "
                                       "with a value whenever the record is read");
    result += "p." + memberOf(name);
    rest = end == StringRef::npos ? StringRef() : rest.substr(end);
  }
  return result;
}

void emitChoiceEnums(const Record &kind, const std::vector<KernelParameter> &parameters,
                     const Constants &constants, llvm::raw_ostream &os) {
  for (const KernelParameter &p : parameters) {
    if (!isChoice(p))
      continue;
    const std::string name = choiceEnumOf(kind, p);
    os << "enum class " << name << " : uint8_t { ";
    llvm::interleaveComma(p.value->getValueAsListOfStrings("choices"), os,
                          [&](StringRef c) { os << llvm::convertToCamelFromSnakeCase(c); });
    os << "};\ninline std::string_view nameOf(" << name << " value) {\n  return "
       << constants.of(p.name) << "Choices[static_cast<size_t>(value)];\n}\n";
  }
}

void emitWeightVisitor(const std::vector<KernelParameter> &parameters, const char *qualifier,
                       llvm::raw_ostream &os) {
  std::vector<std::string> weights;
  for (const KernelParameter &p : parameters)
    if (p.value->getValueAsString("kernelType") == "weight")
      weights.push_back(memberOf(p.name));
  os << "  template <typename Visit> void forEachWeight(Visit &&"
     << (weights.empty() ? "" : "visit") << ")" << qualifier << " {";
  for (const std::string &weight : weights)
    os << " visit(" << weight << ");";
  os << (weights.empty() ? "}\n" : " }\n");
}

// Every parameter with its name, in declaration order: what reads a record's parameters by the
// names an artifact gives (the CUDA backend's declared launches).
void emitFieldVisitor(const std::vector<KernelParameter> &parameters, const Constants &constants,
                      llvm::raw_ostream &os) {
  os << "  template <typename Visit> void forEachField(Visit &&"
     << (parameters.empty() ? "" : "visit") << ") const {";
  for (const KernelParameter &p : parameters)
    os << " visit(std::string_view(" << constants.of(p.name) << "), " << memberOf(p.name) << ");";
  os << (parameters.empty() ? "}\n" : " }\n");
}

void emitStruct(const Record &kind, const std::vector<KernelParameter> &parameters,
                const Constants &constants, llvm::raw_ostream &os) {
  os << "struct " << structOf(kind)
     << " {\n  static constexpr KernelKind kind = KernelKind::" << enumeratorOf(kind) << ";\n";
  for (const KernelParameter &p : parameters) {
    const std::string type = valueTypeOf(kind, p);
    os << "  " << (heldAsOptional(p) ? "std::optional<" + type + ">" : type) << " "
       << memberOf(p.name) << "{};";
    if (!p.defaultExpression.empty())
      os << " // absent: " << llvm::join(llvm::split(p.defaultExpression, '$'), "");
    os << "\n";
  }
  emitWeightVisitor(parameters, "", os);
  emitWeightVisitor(parameters, " const", os);
  emitFieldVisitor(parameters, constants, os);
  os << "};\n";
}

void emitReader(const Record &kind, const std::vector<KernelParameter> &parameters,
                const Constants &constants, llvm::raw_ostream &os) {
  os << "inline Status readParams(const artifact::Attributes &"
     << (parameters.empty() ? "" : "parameters") << ", " << structOf(kind) << " &"
     << (parameters.empty() ? "" : "p") << ") {\n";
  std::set<std::string> earlier;
  for (const KernelParameter &p : parameters) {
    if (!p.defaultExpression.empty())
      os << "  p." << memberOf(p.name) << " = " << defaultOf(kind, p, earlier) << ";\n";
    os << llvm::formatv("  DLM_RETURN_IF_ERROR(readParameter(parameters, {0}, Presence::{1}, "
                        "p.{2}{3}));\n",
                        constants.of(p.name), p.required ? "required" : "optional",
                        memberOf(p.name),
                        isChoice(p) ? ", " + constants.of(p.name) + "Choices" : "");
    if (isScalar(p) && !heldAsOptional(p))
      earlier.insert(p.name); // a value a later default may read
  }
  os << "  return Status::ok();\n}\n";
}

bool emitKernelParams(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  llvm::emitSourceFileHeader("The kernel kinds' typed parameters (runtime/schema/KernelOps.td)", os,
                             records);
  const Constants constants(records);
  const std::vector<const Record *> kinds = kindsOf(records);
  os << "// clang-format off\n";
  for (const Record *kind : kinds) {
    const std::vector<KernelParameter> parameters = parametersOf(*kind);
    for (const KernelParameter &p : parameters)
      checkDeclaration(*kind, p);
    os << "\n// ---- " << kind->getValueAsString("name") << " ----\n";
    emitChoiceEnums(*kind, parameters, constants, os);
    emitStruct(*kind, parameters, constants, os);
    emitReader(*kind, parameters, constants, os);
  }
  os << "\n// Every kind's parameters, in the order of KernelKind.\nusing KernelParams = "
        "std::variant<";
  llvm::interleaveComma(kinds, os, [&](const Record *kind) { os << structOf(*kind); });
  os << ">;\n\n// Each kind's reader, in the order of KernelKind.\n"
        "inline constexpr Status (*kParamsReaders[])(const artifact::Attributes &, "
        "KernelParams &) = {\n";
  for (const Record *kind : kinds)
    os << "    &readAlternative<" << structOf(*kind) << ", KernelParams>,\n";
  os << "};\n// clang-format on\n";
  return false;
}

const mlir::GenRegistration kernelParams("gen-kernel-params",
                                         "The kernel kinds' typed parameters "
                                         "(runtime/model/KernelParams.h)",
                                         emitKernelParams);

} // namespace
