// Every decode program dlmc ships, as the decode dialect (compiler/programs/DecodeModuleImport.h):
// it verifies against runtime/schema/DecodeOps.td, with one op per record.
#include "compiler/programs/DecodeModuleImport.h"
#include "compiler/programs/DecodePrograms.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

namespace dlm::programs {
namespace {

namespace dspec = spec::decode;

// The ops that stand for records: all but the value ops, which become parameters.
int64_t recordOps(mlir::ModuleOp module) {
  int64_t count = 0;
  module.walk([&](mlir::Operation *op) {
    llvm::StringRef name = op->getName().getStringRef();
    if (name.starts_with("decode.") && name != "decode.register" && name != "decode.fact" &&
        name != "decode.constant")
      ++count;
  });
  return count;
}

TEST(DecodeModuleImport, EveryShippedProgramIsTheDialect) {
  for (const std::string &policy : decodeProgramPolicies()) {
    SCOPED_TRACE(policy);
    StatusOr<artifact::DecodingProgram> program = buildDecodeProgram(policy, {}, 4);
    ASSERT_TRUE(program.isOk()) << program.status().message();
    mlir::MLIRContext context;
    auto module = importDecodeRecords(context, policy, program->ops);
    ASSERT_TRUE(module.isOk()) << module.status().message();
    int64_t markers = 0;
    for (const artifact::DecodeOp &record : program->ops)
      markers += record.kind == dspec::kKindElse || record.kind == dspec::kKindEnd;
    EXPECT_EQ(recordOps(**module), static_cast<int64_t>(program->ops.size()) - markers);
  }
}

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
