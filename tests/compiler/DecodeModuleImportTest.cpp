// Records that do not load are no decode dialect (compiler/programs/DecodeModuleImport.h); every
// program dlmc ships imports (DecodeModuleExportTest).
#include "compiler/programs/DecodeModuleImport.h"
#include "compiler/programs/DecodePrograms.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

namespace dlm::programs {
namespace {

namespace dspec = spec::decode;

TEST(DecodeModuleImport, RecordsThatDoNotLoadAreRefused) {
  StatusOr<artifact::DecodingProgram> program = buildDecodeProgram("low-confidence", {}, 4);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  std::vector<artifact::DecodeOp> records = program->ops;
  for (artifact::DecodeOp &record : records)
    if (record.kind == dspec::kKindForward)
      record.parameters["mode"] = std::string("sideways");
  mlir::MLIRContext context;
  auto module = importDecodeRecords(context, "low-confidence", records);
  ASSERT_FALSE(module.isOk());
  EXPECT_NE(module.status().message().find("sideways"), std::string::npos)
      << module.status().message();
}

} // namespace
} // namespace dlm::programs
