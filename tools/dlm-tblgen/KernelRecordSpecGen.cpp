// dlm-tblgen -gen-kernel-record-spec: the kernel records' contract
// (runtime/model/KernelProgram.h includes it) from its declaration, runtime/schema/KernelOps.td:
// the KernelKind enum and the kinds' names in declaration order, every parameter's name and its
// choices' names, each kind's parameter table and the table of kinds (with each kind's in-place
// rule). Included with one of DLM_KERNEL_RECORD_CHECKS, DLM_KERNEL_CPU_RUNNERS,
// DLM_KERNEL_CUDA_KERNELS, DLM_KERNEL_CUDA_LAUNCHES or DLM_KERNEL_PROFILE_CATEGORIES defined, it
// gives instead the rows of that table, in kind order, as DLM_KERNEL_HANDLER(kind, member) calls
// the includer defines (the kind's enumerator, the handler or category the .td names); with the
// same name and _MEMBERS, each handler once as DLM_KERNEL_MEMBER(member), which the handling
// class expands into its declarations. With DLM_KERNEL_CONSTRAINTS, each kind's declared
// constraints as DLM_KERNEL_CONSTRAINT(kind, Params, condition, message).
#include "tools/dlm-tblgen/KernelRecords.h"

#include "mlir/TableGen/GenInfo.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"
#include "llvm/TableGen/TableGenBackend.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using llvm::Record;
using llvm::StringRef;
using namespace dlm::tblgen;

void emitTable(const std::string &table, const std::vector<KernelParameter> &parameters,
               const Constants &constants, llvm::raw_ostream &os) {
  os << "inline constexpr ParameterSpec " << table << "[] = {\n";
  for (const KernelParameter &p : parameters) {
    std::vector<StringRef> choices = p.value->getValueAsListOfStrings("choices");
    os << llvm::formatv("    {{{0}, ParameterType::{1}, {2}", constants.of(p.name),
                        p.value->getValueAsString("kernelType"), p.required ? "true" : "false");
    if (!choices.empty())
      os << ", " << constants.of(p.name) << "Choices, " << choices.size();
    os << "},\n";
  }
  os << "};\n";
}

void emitNames(const llvm::RecordKeeper &records, const Constants &constants,
               llvm::raw_ostream &os) {
  const std::vector<const Record *> kinds = kindsOf(records);
  os << "// ---- Kinds ----\n";
  for (const Record *kind : kinds) {
    StringRef name = kind->getValueAsString("name");
    os << "inline constexpr std::string_view k" << camel(name) << " = \"" << name << "\";\n";
  }
  os << "\n// ---- Parameters, and the choices of those that have them ----\n";
  std::vector<KernelParameter> all =
      parametersOf(*records.getDef("KernelRecordCommon"));
  for (const Record *kind : kinds)
    llvm::append_range(all, parametersOf(*kind));
  std::map<std::string, std::vector<StringRef>> seen; // name → its choices
  for (const KernelParameter &p : all) {
    auto [it, first] = seen.emplace(p.name, p.value->getValueAsListOfStrings("choices"));
    if (!first && it->second != p.value->getValueAsListOfStrings("choices"))
      llvm::PrintFatalError("parameter '" + p.name +
                            "' has other choices in another kind; one name, one set of choices");
    if (!first)
      continue;
    os << "inline constexpr std::string_view " << constants.of(p.name) << " = \"" << p.name
       << "\";\n";
    std::vector<StringRef> choices = p.value->getValueAsListOfStrings("choices");
    for (StringRef choice : choices)
      os << "inline constexpr std::string_view " << constants.of(p.name) << camel(choice)
         << " = \"" << choice << "\";\n";
    if (choices.empty())
      continue;
    os << "inline constexpr std::string_view " << constants.of(p.name) << "Choices[] = {";
    llvm::interleaveComma(choices, os, [&](StringRef choice) {
      os << constants.of(p.name) << camel(choice);
    });
    os << "};\n";
  }
}

void emitContract(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  const std::vector<const Record *> kinds = kindsOf(records);
  const Constants constants(records);
  os << "enum class KernelKind : uint8_t {\n";
  for (const Record *kind : kinds)
    os << "  " << enumeratorOf(*kind) << ",\n";
  os << "};\n\n";
  emitNames(records, constants, os);

  os << "\n// ---- Each kind's parameters ----\n// clang-format off\n";
  emitTable("kCommonParameters", parametersOf(*records.getDef("KernelRecordCommon")), constants,
            os);
  for (const Record *kind : kinds) {
    std::vector<KernelParameter> parameters = parametersOf(*kind);
    if (!parameters.empty())
      emitTable("k" + camel(kind->getValueAsString("name")) + "Parameters", parameters,
                constants, os);
  }
  os << "// clang-format on\n\n";

  os << "inline constexpr KindContract kKindContracts[] = {\n";
  for (const Record *kind : kinds) {
    const std::string stem = camel(kind->getValueAsString("name"));
    const StringRef inPlace = kind->getValueAsString("inPlace");
    if (inPlace != "none" && inPlace != "first" && inPlace != "any")
      llvm::PrintFatalError(kind, "inPlace is none, first or any, not '" + inPlace + "'");
    os << llvm::formatv("    kindContract(k{0}, KernelKind::{1}, {2}, {3}, InPlace::{4}, {5}", stem,
                        enumeratorOf(*kind), kind->getValueAsInt("operands"),
                        kind->getValueAsBit("hasResult") ? "true" : "false",
                        inPlace == "none"    ? "none"
                        : inPlace == "first" ? "firstOperand"
                                             : "anyOperand",
                        kind->getValueAsBit("cudaNeedsKernel") ? "true" : "false");
    if (!parametersOf(*kind).empty())
      os << ", k" << stem << "Parameters";
    os << "),\n";
  }
  os << "};\n";
}

// A dispatch table's handler of `kind`: the .td's, else `prefix` and the kind's name
// (lower camel case without a prefix: rmsNorm, runRmsNorm).
std::string handlerOf(const Record &kind, StringRef field, StringRef prefix) {
  StringRef given = kind.getValueAsString(field);
  if (!given.empty())
    return given.str();
  return prefix.empty() ? enumeratorOf(kind) : prefix.str() + camel(kind.getValueAsString("name"));
}

void emitHandlers(const llvm::RecordKeeper &records, StringRef field, StringRef prefix,
                  llvm::raw_ostream &os) {
  for (const Record *kind : kindsOf(records))
    os << "DLM_KERNEL_HANDLER(" << enumeratorOf(*kind) << ", " << handlerOf(*kind, field, prefix)
       << ")\n";
}

// Each handler once, in the order of its first kind: the declarations a class makes.
void emitMembers(const llvm::RecordKeeper &records, StringRef field, StringRef prefix,
                 llvm::raw_ostream &os) {
  std::set<std::string> declared;
  for (const Record *kind : kindsOf(records)) {
    const std::string member = handlerOf(*kind, field, prefix);
    if (declared.insert(member).second)
      os << "DLM_KERNEL_MEMBER(" << member << ")\n";
  }
}

// A constraint's text with each $name replaced: $width (the result's width), $operandN (operand
// N's), or a parameter of the kind (p.<member>). `quoted`: the text is a message, so each value,
// and each $(expression) of them (no nested parentheses), becomes `" + valueText(...) + "` inside
// a string literal.
std::string substitute(const Record &kind, StringRef text, bool quoted) {
  std::set<std::string> names;
  for (const KernelParameter &p : parametersOf(kind))
    names.insert(p.name);
  std::string result;
  StringRef rest = text;
  while (true) {
    const size_t dollar = rest.find('$');
    const StringRef plain = rest.substr(0, dollar);
    if (quoted && plain.contains('\\'))
      llvm::PrintFatalError(&kind, "a constraint's message has a backslash");
    result += quoted ? llvm::join(llvm::split(plain, '"'), "\\\"") : plain.str();
    if (dollar == StringRef::npos)
      break;
    rest = rest.substr(dollar + 1);
    if (quoted && rest.consume_front("(")) {
      // $(expression) in a message: the value of a C++ expression over $names.
      const size_t close = rest.find(')');
      if (close == StringRef::npos)
        llvm::PrintFatalError(&kind, "a constraint's message opens '$(' without a ')'");
      result += "\" + valueText(" + substitute(kind, rest.substr(0, close), false) + ") + \"";
      rest = rest.substr(close + 1);
      continue;
    }
    const size_t end = rest.find_if_not([](char c) { return llvm::isAlnum(c) || c == '_'; });
    const StringRef name = rest.substr(0, end);
    StringRef index = name;
    std::string value;
    unsigned operand = 0;
    if (name == "width" && kind.getValueAsBit("hasResult"))
      value = "width";
    else if (index.consume_front("operand") && !index.getAsInteger(10, operand) &&
             static_cast<int64_t>(operand) < kind.getValueAsInt("operands"))
      value = "widths[" + std::to_string(operand) + "]";
    else if (names.count(name.str()))
      value = "p." + llvm::convertToCamelFromSnakeCase(name);
    else
      llvm::PrintFatalError(
          &kind, "a constraint reads '$" + name +
                     "', which is not $width of a kind with a result, $operandN of one of its "
                     "operands or a parameter");
    result += quoted ? "\" + valueText(" + value + ") + \"" : value;
    rest = end == StringRef::npos ? StringRef() : rest.substr(end);
  }
  return result;
}

// Each constraint as DLM_KERNEL_CONSTRAINT(kind, Params, condition, message), the message a C++
// string expression.
// Whether `text` reads a weight parameter of `kind` ($name of a weight, not a longer name).
bool readsWeight(const Record &kind, StringRef text) {
  for (const KernelParameter &p : parametersOf(kind)) {
    if (p.value->getValueAsString("kernelType") != "weight")
      continue;
    const std::string name = "$" + p.name;
    for (size_t at = text.find(name); at != StringRef::npos; at = text.find(name, at + 1)) {
      const size_t end = at + name.size();
      if (end == text.size() || !(llvm::isAlnum(text[end]) || text[end] == '_'))
        return true;
    }
  }
  return false;
}

// One row per constraint, in declaration order, saying whether it reads a weight: the loader
// checks those after the kind's check has resolved the weights, the others before it.
void emitConstraints(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  for (const Record *kind : kindsOf(records))
    for (const Record *constraint : kind->getValueAsListOfDefs("constraints")) {
      const StringRef predicate = constraint->getValueAsString("predicate");
      const StringRef message = constraint->getValueAsString("message");
      os << "DLM_KERNEL_CONSTRAINT(" << enumeratorOf(*kind) << ", "
         << camel(kind->getValueAsString("name")) << "Params, "
         << (readsWeight(*kind, predicate) || readsWeight(*kind, message) ? "true" : "false")
         << ", (" << substitute(*kind, predicate, false) << "), std::string(\""
         << substitute(*kind, message, true) << "\"))\n";
    }
}

bool emitKernelRecordSpec(const llvm::RecordKeeper &records, llvm::raw_ostream &os) {
  llvm::emitSourceFileHeader("The kernel records' contract (runtime/schema/KernelOps.td)", os,
                             records);
  struct Table {
    StringRef guard, field, prefix;
  };
  const Table tables[] = {{"DLM_KERNEL_RECORD_CHECKS", "check", ""},
                          {"DLM_KERNEL_CPU_RUNNERS", "cpuRunner", "run"},
                          {"DLM_KERNEL_CUDA_KERNELS", "cudaKernels", ""},
                          {"DLM_KERNEL_CUDA_LAUNCHES", "cudaLaunch", "enqueue"},
                          {"DLM_KERNEL_PROFILE_CATEGORIES", "profileCategory", ""}};
  for (const auto &[guard, field, prefix] : tables) {
    os << (guard == tables[0].guard ? "#if" : "#elif") << " defined(" << guard << ")\n";
    emitHandlers(records, field, prefix, os);
    os << "#undef " << guard << "\n#undef DLM_KERNEL_HANDLER\n";
    os << "#elif defined(" << guard << "_MEMBERS)\n";
    emitMembers(records, field, prefix, os);
    os << "#undef " << guard << "_MEMBERS\n#undef DLM_KERNEL_MEMBER\n";
  }
  os << "#elif defined(DLM_KERNEL_CONSTRAINTS)\n";
  emitConstraints(records, os);
  os << "#undef DLM_KERNEL_CONSTRAINTS\n#undef DLM_KERNEL_CONSTRAINT\n";
  os << "#else\n\n";
  emitContract(records, os);
  os << "\n#endif\n";
  return false;
}

const mlir::GenRegistration
    kernelRecordSpec("gen-kernel-record-spec",
                     "The kernel records' contract (runtime/model/KernelProgram.h)",
                     emitKernelRecordSpec);

} // namespace
