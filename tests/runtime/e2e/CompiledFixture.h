// A reference fixture checkpoint (tests/reference/<family>/fixtures/<name>/) compiled by dlmc and
// opened on a backend, for the e2e tests that hold dlm's forwards and decode programs to the
// fixture's recorded logits and runs (its replay/ arrays).
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/backend/BackendRegistry.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/program/DecodeInterpreter.h"
#include "tests/runtime/NpyArray.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlm::testing {

inline std::vector<int32_t> ids(const NpyArray &array) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < array.size(); ++i)
    out.push_back(array.at<int32_t>(i));
  return out;
}

class CompiledFixture {
public:
  // dlmc compile `dir` `flags` (cuda-emu: also --target all --precision f32, so that the
  // generated kernels compute in float32), then the artifact on `backendName`. A failure is the
  // test's (fatal in the caller's SetUp through HasFatalFailure).
  void open(const std::string &dir, const std::string &flags, const std::string &backendName) {
    dir_ = dir;
    const bool cpu = backendName == "cpu";
    const std::string name = dir.substr(dir.find_last_of('/') + 1);
    const std::string artifactPath = ::testing::TempDir() + "/" + name + "_" + backendName + ".dlm";
    const std::string command = std::string(DLM_DLMC) + " compile " + dir + " " + flags + " -o " +
                                artifactPath + (cpu ? "" : " --target all --precision f32");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
#ifdef DLM_TEST_EMU_CACHE_DIR
    ::setenv("DLM_EMU_CACHE_DIR", DLM_TEST_EMU_CACHE_DIR, 0);
#endif
    StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(artifactPath);
    ASSERT_TRUE(reader) << reader.status().message();
    reader_.emplace(std::move(*reader));
    StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
        model::ModelWeights::load(*reader_);
    ASSERT_TRUE(weights) << weights.status().message();
    weights_ = *weights;
    StatusOr<model::ModelDims> dims = model::modelDims(reader_->config());
    ASSERT_TRUE(dims) << dims.status().message();
    facts_.maskTokenId = reader_->config().maskTokenId;
    facts_.eosTokenIds = reader_->config().eosTokenIds;
    facts_.attentionBlock = dims->attentionBlock;
    BackendOptions options;
    options.threads = 1;
    options.maxSequenceLength = 64;
    options.kvPageTokens = 16; // the page size dlmc generates the device kernels for
    const BackendSource source{*reader_, [&] { return weights_; }, options};
    StatusOr<std::unique_ptr<Backend>> backend =
        BackendRegistry::builtin().create(backendName, source);
    ASSERT_TRUE(backend) << backend.status().message();
    backend_ = std::move(*backend);
  }

  // replay/<name>.npy of the fixture.
  NpyArray replay(const std::string &name) const {
    StatusOr<NpyArray> array = readNpy(dir_ + "/replay/" + name + ".npy");
    EXPECT_TRUE(array) << array.status().message();
    return array ? std::move(*array) : NpyArray{};
  }

  // The artifact's program of `policy` run on `prompt` with `knobs` (and `hooks`, when given).
  StatusOr<sampling::DecodeOutcome> decode(const std::string &policy,
                                           const std::vector<int32_t> &prompt,
                                           const artifact::Attributes &knobs,
                                           const program::ProgramTestHooks *hooks = nullptr) {
    const artifact::DecodingProgram *found = nullptr;
    for (const artifact::DecodingProgram &p : reader_->decodePrograms())
      if (p.policy == policy)
        found = &p;
    if (!found)
      return Status::error("the artifact has no " + policy + " program");
    DLM_ASSIGN_OR_RETURN(program::DecodeProgram loaded,
                         program::DecodeProgram::load(found->ops, found->knobs));
    program::ProgramRequest request;
    request.prompt = prompt;
    request.knobs = knobs;
    request.testHooks = hooks;
    return program::DecodeInterpreter(loaded).run(*backend_, facts_, request, {});
  }

  Backend &backend() { return *backend_; }
  // The token facts the programs run with (the artifact's; a test may change the stop ids).
  sampling::TokenFacts &facts() { return facts_; }

private:
  std::string dir_;
  std::optional<artifact::ArtifactReader> reader_;
  std::shared_ptr<const model::ModelWeights> weights_;
  std::unique_ptr<Backend> backend_;
  sampling::TokenFacts facts_;
};

// Rows [first, first + got.rows) of `want` ([T, V]) against `got`: the relative error
// ||a - b|| / ||b|| over them at most `bound`, and every row's argmax the same; prints the error.
inline void expectLogitRowsMatch(const sampling::LogitsView &got, const NpyArray &want,
                                 int64_t first, double bound, const std::string &what) {
  const int64_t vocab = want.shape.back();
  ASSERT_EQ(got.vocab, vocab) << what;
  double diff = 0, norm = 0;
  for (int64_t r = 0; r < got.rows; ++r) {
    const float *row = got.data + r * vocab;
    int64_t gotArgmax = 0, wantArgmax = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double b = want.at<float>((first + r) * vocab + v), a = row[v];
      diff += (a - b) * (a - b);
      norm += b * b;
      if (row[v] > row[gotArgmax])
        gotArgmax = v;
      if (b > want.at<float>((first + r) * vocab + wantArgmax))
        wantArgmax = v;
    }
    EXPECT_EQ(gotArgmax, wantArgmax) << what << ": argmax of row " << first + r;
  }
  const double error = std::sqrt(diff / norm);
  EXPECT_LE(error, bound) << what;
  std::printf("%s: relative error %.3g\n", what.c_str(), error);
}

// The backends an e2e test runs on: cpu, and cuda-emu where the build has it.
inline std::vector<const char *> fixtureBackends() {
#ifdef DLM_TEST_EMU_CACHE_DIR
  return {"cpu", "cuda-emu"};
#else
  return {"cpu"};
#endif
}

inline std::string backendTestName(const char *backend) {
  return std::string(backend) == "cpu" ? "cpu" : "cuda_emu";
}

} // namespace dlm::testing
