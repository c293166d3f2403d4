// The interpreter's side of DFlash (docs/design/speculative-decoding.md §2.3): forward
// mode=extend with `first`, capture=%reg, input registers of fewer rows than fed and of another
// width than the vocabulary's, and take_rows; on a fake model that records what it was asked.
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dlm::program {
namespace {

using sampling::ForwardSpec;
using sampling::LogitRows;
using sampling::LogitsView;

constexpr int64_t kVocab = 6, kCaptureWidth = 3;

// Logit row of position p: p * 10 + v; the default function captures rows of position p:
// p * 100 + c. The "draft" function captures nothing.
class RecordingModel : public sampling::DecodeModel {
public:
  struct Call {
    ForwardSpec spec;
    std::vector<float> input;
    // The spec's function names a string of the program, which is gone once run() returns.
    std::string function;
  };
  std::vector<Call> calls;

  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<LogitsView> forward(const ForwardSpec &spec) override {
    const int64_t first = spec.fedBegin(), fed = spec.fed();
    Call call{spec, {}, std::string(spec.function)};
    if (spec.input) {
      const int64_t rows = spec.inputRows < 0 ? fed : spec.inputRows;
      call.input.assign(spec.input, spec.input + rows * spec.inputWidth);
    }
    calls.push_back(std::move(call));
    logits_.clear();
    for (int64_t r = spec.rows.begin; r < spec.rows.end; ++r)
      for (int64_t v = 0; v < kVocab; ++v)
        logits_.push_back(static_cast<float>((first + r) * 10 + v));
    captured_.clear();
    if (spec.function.empty())
      for (int64_t r = 0; r < fed; ++r)
        for (int64_t c = 0; c < kCaptureWidth; ++c)
          captured_.push_back(static_cast<float>((first + r) * 100 + c));
    return LogitsView{logits_.data(), spec.rows.count(), kVocab};
  }
  LogitsView capturedRows() const override {
    if (captured_.empty())
      return {};
    return LogitsView{captured_.data(), static_cast<int64_t>(captured_.size()) / kCaptureWidth,
                      kCaptureWidth};
  }
  Status trimCache(int64_t) override { return Status::ok(); }

private:
  std::vector<float> logits_, captured_;
};

StatusOr<sampling::DecodeOutcome> run(RecordingModel &model, const std::string &body) {
  StatusOr<DecodeProgramText> parsed =
      parseDecodeProgram("program t\n\nreserve tokens=16 rows=16\n" + body + "finish steps=0\n");
  if (!parsed)
    return parsed.status();
  StatusOr<DecodeProgram> program = DecodeProgram::load(parsed->records, {});
  if (!program)
    return program.status();
  sampling::TokenFacts facts;
  ProgramRequest request;
  request.prompt = {1, 2, 3, 4, 5};
  return DecodeInterpreter(*program).run(model, facts, request, {});
}

// The target's captured rows, narrowed to 2, feed an extend of the drafter over [1, 5): the
// input holds 2 of its 4 fed rows, 3 values wide.
TEST(ExtendForwardDecode, CaptureTakeRowsAndAnExtendWithFewerInputRows) {
  RecordingModel model;
  StatusOr<sampling::DecodeOutcome> out =
      run(model, "forward mode=full count=5 keep=5 row_begin=4 row_end=5 -> capture=%ctx\n"
                 "take_rows rows=2 of=%ctx\n"
                 "forward mode=extend function=draft first=1 keep=5 count=5 row_begin=2 "
                 "row_end=5 input=%ctx\n");
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(model.calls.size(), 2u);
  const ForwardSpec &draft = model.calls[1].spec;
  EXPECT_EQ(draft.mode, ForwardSpec::Mode::extend);
  EXPECT_EQ(model.calls[1].function, "draft");
  EXPECT_EQ(draft.first, 1);
  EXPECT_EQ(draft.keep, 5);
  EXPECT_EQ(draft.count, 5);
  // Rows relative to the first fed position.
  EXPECT_EQ(draft.rows.begin, 1);
  EXPECT_EQ(draft.rows.end, 4);
  EXPECT_EQ(draft.inputRows, 2);
  EXPECT_EQ(draft.inputWidth, kCaptureWidth);
  EXPECT_EQ(model.calls[1].input, (std::vector<float>{0, 1, 2, 100, 101, 102}));
}

TEST(ExtendForwardDecode, Errors) {
  RecordingModel model;
  const std::string capture =
      "forward mode=full count=5 keep=5 row_begin=4 row_end=5 -> capture=%ctx\n";
  EXPECT_NE(run(model, capture + "take_rows rows=6 of=%ctx\n")
                .status()
                .message()
                .find("cannot take 6 rows of a register holding 5"),
            std::string::npos);
  // The drafter captures nothing.
  EXPECT_NE(run(model, "forward mode=extend function=draft first=0 keep=5 count=5 row_begin=0 "
                       "row_end=5 -> capture=%ctx\n")
                .status()
                .message()
                .find("captures no rows"),
            std::string::npos);
  // Five input rows for the drafter's four fed tokens.
  EXPECT_NE(run(model, capture + "forward mode=extend function=draft first=1 keep=5 count=5 "
                                 "row_begin=1 row_end=5 input=%ctx\n")
                .status()
                .message()
                .find("the input holds 5 rows for 4 fed tokens"),
            std::string::npos);
  // Rows before the first fed position.
  EXPECT_NE(run(model, "forward mode=extend function=draft first=2 keep=5 count=5 row_begin=1 "
                       "row_end=5\n")
                .status()
                .message()
                .find("cannot return rows [1, 5)"),
            std::string::npos);
  // `first` is only for an extend.
  EXPECT_NE(run(model, "forward mode=full first=1 count=5 keep=5 row_begin=4 row_end=5\n")
                .status()
                .message()
                .find("parameter 'first' is only for mode=extend"),
            std::string::npos);
}

// hold_logits keeps rows of the vocabulary's width, which an input passes on as they are.
TEST(ExtendForwardDecode, HeldLogitsStillFeedAnInput) {
  RecordingModel model;
  StatusOr<sampling::DecodeOutcome> out =
      run(model, "forward mode=full count=5 keep=3 row_begin=3 row_end=5\n"
                 "hold_logits temperature=1.0 -> out=%q\n"
                 "forward mode=cached function=draft count=5 keep=3 row_begin=3 row_end=5 "
                 "input=%q\n");
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(model.calls.size(), 2u);
  EXPECT_EQ(model.calls[1].spec.inputWidth, kVocab);
  EXPECT_EQ(model.calls[1].spec.inputRows, -1);
  EXPECT_EQ(model.calls[1].input.size(), static_cast<size_t>(2 * kVocab));
}

} // namespace
} // namespace dlm::program
