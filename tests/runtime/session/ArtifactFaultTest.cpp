// An artifact another program truncates while it is mapped (issue 15, faults): reading a page
// past the new end raises SIGBUS. Loading turns that into an error naming the byte, and once the
// weights are loaded nothing reads the mapping again, so a session keeps generating.
#include "runtime/session/Session.h"

#include "tests/runtime/model/TinyModel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

namespace dlm {
namespace {

using ::testing::HasSubstr;
using dlm::testing::TempDir;
using dlm::testing::TinyModel;

class ArtifactFaultTest : public ::testing::Test {
protected:
  std::shared_ptr<LoadedModel> open(const dlm::testing::TinyModelOptions &options = {}) {
    TinyModel(options).write(path);
    StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(path);
    EXPECT_TRUE(model.isOk()) << model.status().message();
    return model ? *model : nullptr;
  }
  void generatesAfterTruncation(const dlm::testing::TinyModelOptions &options);
  // Keeps the first 4096 bytes: the metadata, not the weights.
  void truncate() { ASSERT_EQ(::truncate(path.c_str(), 4096), 0); }

  static GenerateRequest request() {
    GenerateRequest r;
    r.promptIds = {3, 4, 5};
    r.knobs["gen_length"] = int64_t(8);
    r.knobs["block_length"] = int64_t(4);
    r.knobs["steps"] = int64_t(8);
    return r;
  }

  TempDir dir;
  const std::string path = dir.file("tiny.dlm");
};

TEST_F(ArtifactFaultTest, TruncatedBeforeTheWeightsLoadIsANamedError) {
  std::shared_ptr<LoadedModel> model = open();
  ASSERT_TRUE(model);
  truncate();
  StatusOr<std::unique_ptr<Session>> session = Session::create(model, SessionOptions{});
  ASSERT_FALSE(session.isOk());
  EXPECT_THAT(session.status().message(),
              HasSubstr("artifact '" + path + "': the file shrank while in use"));
  EXPECT_THAT(session.status().message(), HasSubstr("can no longer be read"));
  // Verification reads every byte: the same error, not a crash.
  const Status verified = model->artifact().verifyIntegrity();
  EXPECT_THAT(verified.message(), HasSubstr("the file shrank while in use"));
}

TEST_F(ArtifactFaultTest, TruncatedAfterTheWeightsLoadedKeepsGenerating) {
  for (bool int4 : {false, true}) {
    SCOPED_TRACE(int4 ? "int4 weights and tables" : "f32 weights");
    // int4: the codes and the f16 group scales of the embedding table are copied out too.
    dlm::testing::TinyModelOptions options;
    options.int4Group = int4 ? 8 : 0;
    options.int4Tables = int4;
    generatesAfterTruncation(options);
  }
}

void ArtifactFaultTest::generatesAfterTruncation(const dlm::testing::TinyModelOptions &options) {
  std::shared_ptr<LoadedModel> model = open(options);
  ASSERT_TRUE(model);
  StatusOr<std::unique_ptr<Session>> session = Session::create(model, SessionOptions{});
  ASSERT_TRUE(session.isOk()) << session.status().message();
  StatusOr<GenerateResult> before = (*session)->generate(request());
  ASSERT_TRUE(before.isOk()) << before.status().message();
  truncate();
  StatusOr<GenerateResult> after = (*session)->generate(request());
  ASSERT_TRUE(after.isOk()) << after.status().message();
  EXPECT_EQ(after->outputIds, before->outputIds);
}

} // namespace
} // namespace dlm
