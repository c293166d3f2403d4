// Records → decode dialect → records is the identity for every program dlmc ships, and what
// cannot be a record is refused with a message that names it.
#include "compiler/programs/DecodeModuleExport.h"
#include "compiler/dialects/decode/DecodeDialect.h"
#include "compiler/programs/DecodeModuleImport.h"
#include "compiler/programs/DecodePrograms.h"

#include "runtime/program/DecodeProgram.h"
#include "runtime/program/DecodeProgramSpec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace dlm::programs {
namespace {

std::string describe(const artifact::DecodeOp &record) {
  std::string text = record.kind + (record.name.empty() ? "" : ":" + record.name);
  for (const auto &[key, value] : record.parameters) {
    text += " " + key + "=";
    std::visit(
        [&](const auto &v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
            text += v;
          else
            text += std::to_string(v);
        },
        value);
  }
  return text;
}

mlir::func::FuncOp onlyFunction(mlir::ModuleOp module) {
  return *module.getOps<mlir::func::FuncOp>().begin();
}

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

// Every shipped program imports, verified against DecodeOps.td, with one op per record (else and
// end are regions), and exports to the same records.
TEST(DecodeModuleExport, EveryShippedProgramRoundTrips) {
  for (const std::string &policy : decodeProgramPolicies()) {
    SCOPED_TRACE(policy);
    StatusOr<artifact::DecodingProgram> program = buildDecodeProgram(policy, {}, 4);
    ASSERT_TRUE(program.isOk()) << program.status().message();
    mlir::MLIRContext context;
    auto module = importDecodeRecords(context, policy, program->ops);
    ASSERT_TRUE(module.isOk()) << module.status().message();
    int64_t markers = 0;
    for (const artifact::DecodeOp &record : program->ops)
      markers += record.kind == spec::decode::kKindElse || record.kind == spec::decode::kKindEnd;
    EXPECT_EQ(recordOps(**module), static_cast<int64_t>(program->ops.size()) - markers);
    auto records = exportDecodeRecords(onlyFunction(**module));
    ASSERT_TRUE(records.isOk()) << records.status().message();
    ASSERT_EQ(records->size(), program->ops.size());
    for (size_t i = 0; i < records->size(); ++i)
      EXPECT_TRUE((*records)[i] == program->ops[i])
          << "record " << i << ": " << describe((*records)[i]) << " vs "
          << describe(program->ops[i]);
  }
}

// What dlmc stores, each policy's program as its builder writes it lowered, equals the program
// written by hand that the builder replaced (tests/compiler/written-programs), record for record,
// with dlmc's unroll on every denoise loop: the compiler writes exactly what was proven before.
TEST(DecodeModuleExport, StoredRecordsAreTheWrittenOnes) {
  for (const std::string &policy : decodeProgramPolicies()) {
    SCOPED_TRACE(policy);
    std::ifstream file(std::string(DLM_WRITTEN_PROGRAM_DIR) + "/" + policy + ".decode");
    ASSERT_TRUE(file) << "no " << policy << ".decode";
    std::stringstream text;
    text << file.rdbuf();
    auto written = program::parseDecodeProgram(text.str());
    ASSERT_TRUE(written.isOk()) << written.status().message();
    for (artifact::DecodeOp &record : written->records)
      if (record.kind == spec::decode::kKindDenoiseLoop)
        record.parameters["unroll"] = int64_t{7};
    StatusOr<artifact::DecodingProgram> stored = buildDecodeProgram(policy, {}, 7);
    ASSERT_TRUE(stored.isOk()) << stored.status().message();
    ASSERT_EQ(stored->ops.size(), written->records.size());
    for (size_t i = 0; i < stored->ops.size(); ++i)
      EXPECT_TRUE(stored->ops[i] == written->records[i])
          << "record " << i << ": " << describe(stored->ops[i]) << " vs "
          << describe(written->records[i]);
  }
}

// A text literal that starts like a reference keeps its doubled prefix (`%%x` is the text `%x`).
TEST(DecodeModuleExport, TextsThatLookLikeReferencesStayTexts) {
  std::vector<artifact::DecodeOp> records = {{"check",
                                              "",
                                              {{"cond", true},
                                               {"message", std::string("%%50 of $$5 @@ {}")},
                                               {"arg0", std::string("%%x")}}},
                                             {"finish", "", {{"steps", int64_t{0}}}}};
  mlir::MLIRContext context;
  auto module = importDecodeRecords(context, "texts", records);
  ASSERT_TRUE(module.isOk()) << module.status().message();
  auto exported = exportDecodeRecords(onlyFunction(**module));
  ASSERT_TRUE(exported.isOk()) << exported.status().message();
  ASSERT_EQ(exported->size(), records.size());
  for (size_t i = 0; i < records.size(); ++i)
    EXPECT_EQ(describe((*exported)[i]), describe(records[i]));
}

TEST(DecodeModuleExport, AnOpThatIsNoRecordIsRefused) {
  mlir::MLIRContext context;
  context.loadDialect<decode::DecodeDialect, mlir::func::FuncDialect>();
  mlir::OpBuilder builder(&context);
  mlir::Location loc = builder.getUnknownLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module->getBody());
  auto function =
      mlir::func::FuncOp::create(builder, loc, "strange", builder.getFunctionType({}, {}));
  builder.setInsertionPointToStart(function.addEntryBlock());
  mlir::func::CallOp::create(builder, loc, "elsewhere", mlir::TypeRange{}, mlir::ValueRange{});
  mlir::func::ReturnOp::create(builder, loc);
  auto exported = exportDecodeRecords(function);
  ASSERT_FALSE(exported.isOk());
  EXPECT_NE(exported.status().message().find("'func.call' is not a decode op"), std::string::npos)
      << exported.status().message();
}

} // namespace
} // namespace dlm::programs
