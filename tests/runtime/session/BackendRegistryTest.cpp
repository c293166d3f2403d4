// The backends come from the registry the build fills (runtime/backend/): every backend by its
// name, a clear error for one the build lacks, none registered twice.
#include "runtime/backend/BackendRegistry.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dlm {
namespace {

TEST(BackendRegistryTest, TheBuildsBackendsAreRegistered) {
  const std::vector<std::string> names = BackendRegistry::builtin().names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
#ifdef DLM_TEST_HAVE_CUDA
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda-emu"), names.end());
#endif
}

TEST(BackendRegistryTest, UnknownNamesAndDuplicatesAreNamed) {
  BackendRegistry registry;
  auto none = [](const BackendSource &) -> StatusOr<std::unique_ptr<Backend>> {
    return Status::error("not built");
  };
  ASSERT_TRUE(registry.add("a", none).isOk());
  ASSERT_TRUE(registry.add("b", none).isOk());
  EXPECT_EQ(registry.add("a", none).message(), "backend 'a' is registered twice");
  testing::TempDir dir;
  testing::TinyModel(testing::TinyModelOptions{}).write(dir.file("tiny.dlm"));
  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(dir.file("tiny.dlm"));
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  BackendOptions options;
  BackendSource source{*reader, [&] { return model::ModelWeights::load(*reader); }, options};
  EXPECT_EQ(registry.create("c", source).status().message(),
            "unknown backend 'c' (expected a or b)");
  EXPECT_EQ(registry.create("a", source).status().message(), "not built");
}

} // namespace
} // namespace dlm
