// dlmc list architectures|policies: what dlmc compiles, one per line, from the tables the
// importer and the compiler use (so the README's lists are checked against them:
// tests/check_readme_lists.py).
#include "tools/dlmc/Commands.h"

#include "compiler/programs/DecodePrograms.h"
#include "importer/model/ModelFamily.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace dlm::dlmc {

namespace {

const char *supportText(importer::KnownArchitecture::Support support) {
  switch (support) {
  case importer::KnownArchitecture::Support::imported:
    return "imported";
  case importer::KnownArchitecture::Support::besideItsTarget:
    return "imported beside its target (dlmc compile TARGET --draft DIR)";
  case importer::KnownArchitecture::Support::notYet:
    return "not supported yet";
  }
  return "";
}

} // namespace

int runList(const std::string &what) {
  if (what == "architectures") {
    for (const importer::KnownArchitecture &known : importer::knownArchitectures())
      llvm::outs() << known.name << "\t" << supportText(known.support) << "\n";
    return 0;
  }
  if (what == "policies") {
    const std::vector<std::string> defaults = programs::defaultDecodeProgramPolicies();
    for (const std::string &policy : programs::decodeProgramPolicies()) {
      const bool byDefault = std::find(defaults.begin(), defaults.end(), policy) != defaults.end();
      llvm::outs() << policy << "\t" << (byDefault ? "default" : "on request (--policy)") << "\n";
    }
    return 0;
  }
  llvm::errs() << "dlmc list: unknown list '" << what << "' (expected architectures or policies)\n";
  return 2;
}

} // namespace dlm::dlmc
