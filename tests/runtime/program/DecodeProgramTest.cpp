// Decode records: the text notation (parse, print, round trip), the loader's checks (every
// malformed program is refused with a message naming the record), knob resolution, and the
// interpreter's own run-time errors and host arithmetic.
#include "runtime/program/DecodeProgram.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/ProgramKnobs.h"
#include "tests/runtime/program/DecodeTestSupport.h"
#include "tests/runtime/sampling/FullCachedModel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

// Counts heap allocations while `gCounting` is set (the whole binary's operator new; counting is
// off except around the runs that NoStepAllocates measures).
namespace {
std::atomic<bool> gCounting{false};
std::atomic<int64_t> gAllocations{0};
} // namespace

void *operator new(std::size_t size) {
  if (gCounting.load(std::memory_order_relaxed))
    gAllocations.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(size ? size : 1))
    return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

namespace dlm::program {
namespace {

using ::testing::HasSubstr;

StatusOr<DecodeProgram> loadText(const std::string &text, const artifact::Attributes &stored = {}) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(text);
  if (!parsed)
    return parsed.status();
  return DecodeProgram::load(parsed->records, stored);
}

std::string loadError(const std::string &text) {
  StatusOr<DecodeProgram> program = loadText(text);
  return program.isOk() ? "loaded" : program.status().message();
}

std::string parseError(const std::string &text) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(text);
  return parsed.isOk() ? "parsed" : parsed.status().message();
}

// ---- Notation ---------------------------------------------------------------------------------

TEST(DecodeProgramTextTest, ParsesKindsNamesValuesAndResults) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(
      "program low-confidence  # a comment\n"
      "\n"
      "knob:cache type=text default=none one_of=none,prefix error=\"bad '{}' # not a comment\"\n"
      "  add a=$gen_length b=-3 -> out=%x   # trailing\n"
      "check:\"a label\" cond=%c message=\"%literal\" arg0=@mask arg1=1.5 arg2=true\n");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  EXPECT_EQ(parsed->policy, "low-confidence");
  ASSERT_EQ(parsed->records.size(), 3u);
  const DecodeRecord &knob = parsed->records[0];
  EXPECT_EQ(knob.kind, "knob");
  EXPECT_EQ(knob.name, "cache");
  EXPECT_EQ(std::get<std::string>(knob.parameters.at("one_of")), "none,prefix");
  EXPECT_EQ(std::get<std::string>(knob.parameters.at("error")), "bad '{}' # not a comment");
  const DecodeRecord &add = parsed->records[1];
  EXPECT_EQ(std::get<std::string>(add.parameters.at("a")), "$gen_length");
  EXPECT_EQ(std::get<int64_t>(add.parameters.at("b")), -3);
  EXPECT_EQ(std::get<std::string>(add.parameters.at("out")), "%x");
  const DecodeRecord &check = parsed->records[2];
  EXPECT_EQ(check.name, "a label");
  // A quoted text that starts like a reference is a literal: stored with the character doubled.
  EXPECT_EQ(std::get<std::string>(check.parameters.at("message")), "%%literal");
  EXPECT_EQ(std::get<double>(check.parameters.at("arg1")), 1.5);
  EXPECT_EQ(std::get<bool>(check.parameters.at("arg2")), true);
}

TEST(DecodeProgramTextTest, PrintedRecordsParseBackToTheSameRecords) {
  DecodeProgramText program;
  program.policy = "odd name";
  DecodeRecord record;
  record.kind = "check";
  record.name = "with space";
  record.parameters = {
      {"cond", std::string("%c")},
      {"message", std::string("quote \" backslash \\ newline \n tab \t hash #")},
      {"arg0", 0.1},
      {"arg1", 3.0},
      {"arg2", std::string("%%not_a_register")},
  };
  program.records.push_back(record);
  DecodeRecord values;
  values.kind = "future_kind"; // unknown kinds print and parse too; the loader refuses them
  values.parameters = {{"tiny", 1e-300},
                       {"big", -1.7976931348623157e308},
                       {"inf", HUGE_VAL},
                       {"int", int64_t{-9223372036854775807}},
                       {"word", std::string("true_ish,a-b.c:d")},
                       {"kw", std::string("true")},
                       {"empty", std::string()},
                       {"num", std::string("12")},
                       {"flag", false}};
  program.records.push_back(values);
  const std::string printed = printDecodeProgram(program);
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(printed);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message() << "\n" << printed;
  EXPECT_EQ(parsed->policy, program.policy);
  ASSERT_EQ(parsed->records.size(), 2u);
  EXPECT_TRUE(parsed->records[0] == program.records[0]) << printed;
  EXPECT_TRUE(parsed->records[1] == program.records[1]) << printed;
}

TEST(DecodeProgramTextTest, TheFixturesRoundTrip) {
  struct Fixture {
    const char *name;
    size_t minRecords;
    const char *nestedLoop; // a loop nested in another, indented once
  };
  for (const Fixture &fixture :
       {Fixture{"low-confidence.decode", 40, "\n  denoise_loop:denoise_step "},
        Fixture{"entropy-bound.decode", 40, "\n  denoise_loop:denoise_step "},
        Fixture{"diffusion-gemma.decode", 40, "\n  denoise_loop:denoise_step "},
        Fixture{"autoregressive.decode", 20, "\n  forward mode=append "}}) {
    const char *name = fixture.name;
    SCOPED_TRACE(name);
    StatusOr<DecodeProgramText> parsed = parseDecodeProgram(testing::readDecodeProgramText(name));
    ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
    EXPECT_GT(parsed->records.size(), fixture.minRecords);
    const std::string printed = printDecodeProgram(*parsed);
    StatusOr<DecodeProgramText> reparsed = parseDecodeProgram(printed);
    ASSERT_TRUE(reparsed.isOk()) << reparsed.status().message();
    EXPECT_EQ(reparsed->policy, parsed->policy);
    EXPECT_TRUE(reparsed->records == parsed->records);
    EXPECT_EQ(printDecodeProgram(*reparsed), printed);
    // Results follow the arrow and nesting is indented.
    EXPECT_THAT(printed, HasSubstr(fixture.nestedLoop));
    EXPECT_THAT(printed, HasSubstr(" -> index="));
    EXPECT_TRUE(DecodeProgram::load(parsed->records).isOk());
  }
}

TEST(DecodeProgramTextTest, NamesTheLineOfAnError) {
  EXPECT_EQ(parseError("set a=1 -> out=%x\nset a=\"open -> out=%y\n"),
            "line 2: unterminated quoted text");
  EXPECT_EQ(parseError("add out=%x a=1 b=2"),
            "line 1: 'out' is a result of 'add': put it after '->'");
  EXPECT_EQ(parseError("add a=1 -> b=2 out=%x"), "line 1: 'b' is not a result of 'add'");
  EXPECT_EQ(parseError("add a=1 a=2 -> out=%x"), "line 1: parameter 'a' given twice");
  EXPECT_EQ(parseError("set a=1 -> -> out=%x"), "line 1: a second '->'");
  EXPECT_EQ(parseError("set a=1x -> out=%x"),
            "line 1: '1x' is not a value (quote text that is not a bare word)");
  EXPECT_EQ(parseError("set a=%1 -> out=%x"), "line 1: '%1' is not a reference (% and a name)");
  EXPECT_EQ(parseError("set a"), "line 1: expected key=value, got 'a'");
  EXPECT_EQ(parseError("set a=1\nprogram late"), "line 2: 'program' must be the first line");
  EXPECT_EQ(parseError("set: a=1"), "line 1: expected a record name after ':'");
}

// ---- Loading ----------------------------------------------------------------------------------

// A minimal valid program; tests splice errors into it.
std::string program(const std::string &body) {
  return "knob:n type=int default=2\n"
         "knob:flag type=bool optional=true\n"
         "set a=0 -> out=%step\n" +
         body + "finish steps=%step\n";
}

const char *kLoop = "block_loop:block count=$n -> index=%b\n"
                    "  denoise_loop:step cap=2 bound=4 base=%step -> index=%i global=%s ran=%r\n"
                    "    eq a=%i b=1 -> out=%done\n"
                    "    until cond=%done\n"
                    "  end\n"
                    "  add a=%step b=%r -> out=%step\n"
                    "end\n";

TEST(DecodeProgramTest, LoadsAWellFormedProgram) {
  StatusOr<DecodeProgram> loaded = loadText(program(kLoop));
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->knobs().size(), 2u);
  // Jump targets: block_loop ↔ its end, the denoise loop ↔ its end, until → its loop.
  const std::vector<Instruction> &code = loaded->code();
  ASSERT_EQ(code.size(), 9u);
  EXPECT_EQ(code[1].op, OpKind::blockLoop);
  EXPECT_EQ(code[1].target, 7);
  EXPECT_EQ(code[7].target, 1);
  EXPECT_EQ(code[2].target, 5);
  EXPECT_EQ(code[4].op, OpKind::until);
  EXPECT_EQ(code[4].target, 2);
}

TEST(DecodeProgramTest, RefusesMalformedStructure) {
  EXPECT_EQ(loadError(program("end\n")), "decode record 3 ('end'): unbalanced 'end'");
  EXPECT_EQ(loadError("if cond=true\n"), "decode record 0 ('if'): 'if' has no 'end'");
  EXPECT_EQ(loadError(program("if cond=true\n")),
            "decode record 4 ('finish'): 'finish' inside a loop or branch");
  EXPECT_EQ(loadError(program("else\n")), "decode record 3 ('else'): 'else' without an open 'if'");
  EXPECT_EQ(loadError(program("denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "  until cond=true\n"
                              "  set a=1 -> out=%x\n"
                              "end\n")),
            "decode record 4 ('until'): 'until' must be the last record of a denoise_loop");
  EXPECT_EQ(loadError(program("denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "  if cond=true\n"
                              "    until cond=true\n"
                              "  end\n"
                              "end\n")),
            "decode record 5 ('until'): 'until' must be the last record of a denoise_loop");
  EXPECT_EQ(loadError(program("denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "end\n")),
            "decode record 4 ('end'): a denoise_loop must end with 'until'");
  EXPECT_EQ(loadError(program("exit_if cond=true\n")),
            "decode record 3 ('exit_if'): 'exit_if' outside a block_loop");
  EXPECT_EQ(loadError(program("block_loop count=1 -> index=%b\n"
                              "  denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "    exit_if cond=true\n"
                              "    until cond=true\n"
                              "  end\n"
                              "end\n")),
            "decode record 5 ('exit_if'): 'exit_if' inside a denoise_loop");
  EXPECT_EQ(loadError(program("denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "  block_loop count=1 -> index=%b\n"
                              "  end\n"
                              "  until cond=true\n"
                              "end\n")),
            "decode record 4 ('block_loop'): a loop inside a denoise_loop (loops nest only as "
            "block_loop around denoise_loop)");
  EXPECT_EQ(loadError("set a=0 -> out=%x\n"), "decode program: the last record must be 'finish'");
  EXPECT_EQ(loadError(program("") + "set a=1 -> out=%x\n"),
            "decode record 4 ('set'): 'finish' must be the last record");
  EXPECT_EQ(loadError(program("knob:late type=int default=1\n")),
            "decode record 3 ('knob:late'): knob declarations must come before every other "
            "record");
}

TEST(DecodeProgramTest, RefusesUnknownNamesAndBadParameters) {
  EXPECT_EQ(loadError(program("frobnicate a=1\n")),
            "decode record 3 ('frobnicate'): unknown kind 'frobnicate'");
  EXPECT_EQ(loadError(program("set a=$stepz -> out=%x\n")),
            "decode record 3 ('set'): unknown knob '$stepz'");
  EXPECT_EQ(loadError(program("set a=@nothing -> out=%x\n")),
            "decode record 3 ('set'): unknown fact '@nothing'");
  EXPECT_EQ(loadError(program("set a=1 c=2 -> out=%x\n")),
            "decode record 3 ('set'): unknown parameter 'c'");
  EXPECT_EQ(loadError(program("add a=1 -> out=%x\n")),
            "decode record 3 ('add'): missing parameter 'b'");
  EXPECT_EQ(loadError(program("forward mode=%m count=1 keep=0 row_begin=0 row_end=1\n")),
            "decode record 3 ('forward'): parameter 'mode' must be a literal");
  EXPECT_EQ(loadError(program("forward mode=partial count=1 keep=0 row_begin=0 row_end=1\n")),
            "decode record 3 ('forward'): parameter 'mode' must be one of "
            "full,cached,window,append,extend, got 'partial'");
  EXPECT_EQ(loadError(program("forward mode=cached count=1 keep=0 row_begin=0 row_end=1 "
                              "decoded=false\n")),
            "decode record 3 ('forward'): a cached forward is always decoded");
  EXPECT_EQ(loadError(program("forward mode=window count=1 keep=0 row_begin=0 row_end=1\n")),
            "decode record 3 ('forward'): parameter 'feed_end' is required with mode=window");
  EXPECT_EQ(loadError(program("forward mode=window count=2 keep=0 feed_end=1 row_begin=0 "
                              "row_end=1 decoded=false\n")),
            "decode record 3 ('forward'): a window forward is always decoded");
  EXPECT_EQ(loadError(program("forward mode=full count=2 keep=0 feed_end=1 row_begin=0 "
                              "row_end=1\n")),
            "decode record 3 ('forward'): parameter 'feed_end' is only for mode=window");
  EXPECT_EQ(loadError(program("accept rule=top_k candidates=masked score=%s -> keep=%k\n")),
            "decode record 3 ('accept'): undefined register '%s'");
  EXPECT_EQ(loadError(program("fill_row value=0.5 -> out=%s\n"
                              "accept rule=top_k candidates=masked score=%s -> keep=%k\n")),
            "decode record 4 ('accept'): parameter 'k' is required with rule=top_k");
  EXPECT_EQ(loadError(program("defined knob=%step -> out=%x\n")),
            "decode record 3 ('defined'): parameter 'knob' must name a knob ($name)");
  EXPECT_EQ(loadError(program("defined knob=5 -> out=%x\n")),
            "decode record 3 ('defined'): parameter 'knob' must name a knob ($name)");
  EXPECT_EQ(loadError(program("add a=1 b=2 -> out=7\n")),
            "decode record 3 ('add'): result 'out' must be a register (%name)");
  EXPECT_EQ(loadError("knob:x type=int\nfinish steps=0\n"),
            "decode record 0 ('knob:x'): knob 'x' needs a default or optional=true");
  EXPECT_EQ(loadError("knob:x type=int default=1\nknob:x type=int default=2\nfinish steps=0\n"),
            "decode record 1 ('knob:x'): knob 'x' is declared twice");
  EXPECT_EQ(loadError("knob:x type=int default=\"a\"\nfinish steps=0\n"),
            "decode record 0 ('knob:x'): default: knob 'x' must be an integer");
}

TEST(DecodeProgramTest, RefusesUndefinedRegistersAndTypeClashes) {
  EXPECT_EQ(loadError(program("add a=%nope b=1 -> out=%x\n")),
            "decode record 3 ('add'): undefined register '%nope'");
  // Written in one branch only.
  EXPECT_EQ(loadError(program("if cond=$flag\n"
                              "  set a=1 -> out=%x\n"
                              "end\n"
                              "set a=%x -> out=%y\n")),
            "decode record 6 ('set'): register '%x' is not written on every path to here");
  // Written in both branches: fine.
  EXPECT_EQ(loadError(program("if cond=$flag\n"
                              "  set a=1 -> out=%x\n"
                              "else\n"
                              "  set a=2 -> out=%x\n"
                              "end\n"
                              "set a=%x -> out=%y\n")),
            "loaded");
  // A loop's index exists only inside it, its `ran` only after it.
  EXPECT_EQ(loadError(program(std::string(kLoop) + "set a=%b -> out=%y\n")),
            "decode record 10 ('set'): register '%b' is not written on every path to here");
  EXPECT_EQ(loadError(program("denoise_loop cap=1 bound=1 base=0 -> index=%i global=%s ran=%r\n"
                              "  set a=%r -> out=%y\n"
                              "  until cond=true\n"
                              "end\n")),
            "decode record 4 ('set'): register '%r' is not written on every path to here");
  EXPECT_EQ(loadError(program("set a=1.5 -> out=%step\n")),
            "decode record 3 ('set'): register '%step' is real here but int elsewhere");
  EXPECT_EQ(loadError(program("add a=1 b=1.5 -> out=%x\n")),
            "decode record 3 ('add'): operands 'a' (int) and 'b' (real) differ in type");
  EXPECT_EQ(loadError(program("rem a=1.0 b=1.5 -> out=%x\n")),
            "decode record 3 ('rem'): rem needs int operands");
  EXPECT_EQ(loadError(program("window begin=0 end=$flag\n")),
            "decode record 3 ('window'): parameter 'end' must be int, but '$flag' is bool");
  EXPECT_EQ(loadError(program("if cond=1\nend\n")),
            "decode record 3 ('if'): parameter 'cond' must be bool, got int");
}

// ---- Knobs ------------------------------------------------------------------------------------

const char *kKnobs = "knob:steps type=int default=16 max=65536\n"
                     "knob:threshold type=real optional=true\n"
                     "knob:step_cap type=int optional=true min=1\n"
                     "knob:cache type=text default=none one_of=none,prefix "
                     "error=\"unknown cache mode '{}' (expected none or prefix)\"\n"
                     "knob:mode type=text default=a one_of=a,b\n"
                     "finish steps=$steps\n";

std::string knobError(const artifact::Attributes &overrides) {
  StatusOr<DecodeProgram> loaded = loadText(kKnobs);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  std::vector<KnobValue> values;
  Status status = resolveKnobs(*loaded, overrides, values);
  return status.isOk() ? "ok" : status.message();
}

// Infinities and NaNs mean nothing to any program (the legacy loops let a NaN temperature
// through to "temperature must be >= 0"); they are refused by name.
TEST(ProgramKnobsTest, RealsMustBeFinite) {
  StatusOr<DecodeProgram> loaded = loadText(testing::readDecodeProgramText("low-confidence.decode"));
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  std::vector<KnobValue> values;
  EXPECT_EQ(resolveKnobs(*loaded, {{"temperature", std::nan("")}}, values).message(),
            "knob 'temperature' must be a finite real, got nan");
  EXPECT_EQ(resolveKnobs(*loaded, {{"credit_alpha", HUGE_VAL}}, values).message(),
            "knob 'credit_alpha' must be a finite real, got inf");
}

TEST(ProgramKnobsTest, ErrorsNameTheKnob) {
  EXPECT_EQ(knobError({{"stepz", int64_t{1}}}),
            "unknown knob 'stepz' (its knobs: steps, threshold, step_cap, cache, mode)");
  EXPECT_EQ(knobError({{"steps", std::string("x")}}), "knob 'steps' must be an integer");
  EXPECT_EQ(knobError({{"steps", 2.5}}), "knob 'steps' must be an integer");
  EXPECT_EQ(knobError({{"steps", 16.0}}), "ok");
  EXPECT_EQ(knobError({{"threshold", std::string("x")}}),
            "knob 'threshold' must be a number or \"none\"");
  EXPECT_EQ(knobError({{"threshold", true}}), "knob 'threshold' must be a number");
  EXPECT_EQ(knobError({{"threshold", int64_t{1}}}), "ok");
  EXPECT_EQ(knobError({{"step_cap", int64_t{0}}}), "knob 'step_cap' must be at least 1, got 0");
  EXPECT_EQ(knobError({{"steps", int64_t{1} << 52}}),
            "knob 'steps' must be at most 65536, got 4503599627370496");
  EXPECT_EQ(knobError({{"steps", int64_t{65536}}}), "ok");
  EXPECT_EQ(knobError({{"cache", std::string("dual")}}),
            "unknown cache mode 'dual' (expected none or prefix)");
  EXPECT_EQ(knobError({{"mode", std::string("c")}}), "knob 'mode' must be one of a,b, got \"c\"");
  EXPECT_EQ(knobError({{"cache", int64_t{1}}}), "knob 'cache' must be a string");
}

// A damaged artifact's stored default is held to the declared range like a request's value: a
// max_steps of 2^52 made DiffusionGemma's generation run for ever (found by fuzz/artifact.cpp).
TEST(ProgramKnobsTest, StoredKnobsOutsideTheirRangeAreRefused) {
  for (const char *file : {"diffusion-gemma.decode", "entropy-bound.decode"}) {
    StatusOr<DecodeProgram> loaded =
        loadText(testing::readDecodeProgramText(file), {{"max_steps", int64_t{1} << 52}});
    ASSERT_FALSE(loaded.isOk()) << file;
    EXPECT_NE(loaded.status().message().find(
                  "knob 'max_steps' must be at most 65536, got 4503599627370496"),
              std::string::npos)
        << loaded.status().message();
  }
}

TEST(ProgramKnobsTest, DefaultsThenStoredKnobsThenOverrides) {
  StatusOr<DecodeProgram> loaded = loadText(kKnobs, {{"steps", int64_t{8}}, {"threshold", 0.5}});
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  std::vector<KnobValue> values;
  ASSERT_TRUE(resolveKnobs(*loaded, {}, values).isOk());
  const size_t steps = static_cast<size_t>(loaded->findKnob("steps"));
  const size_t threshold = static_cast<size_t>(loaded->findKnob("threshold"));
  const size_t cap = static_cast<size_t>(loaded->findKnob("step_cap"));
  EXPECT_EQ(values[steps].integer, 8);
  EXPECT_TRUE(values[threshold].defined);
  EXPECT_EQ(values[threshold].real, 0.5);
  EXPECT_FALSE(values[cap].defined);
  ASSERT_TRUE(
      resolveKnobs(*loaded, {{"steps", int64_t{4}}, {"threshold", std::string("none")}}, values)
          .isOk());
  EXPECT_EQ(values[steps].integer, 4);
  EXPECT_FALSE(values[threshold].defined);
  EXPECT_EQ(values[threshold].real, 0.0); // an unset knob reads as zero
  // Knobs only another program declares are ignored when the caller says so.
  auto elsewhere = [](std::string_view name) { return name == "max_steps"; };
  EXPECT_TRUE(resolveKnobs(*loaded, {{"max_steps", int64_t{3}}}, values, elsewhere).isOk());
  EXPECT_FALSE(resolveKnobs(*loaded, {{"max_stepz", int64_t{3}}}, values, elsewhere).isOk());
  // Stored knobs are checked when the program loads.
  EXPECT_EQ(loadText(kKnobs, {{"stepz", int64_t{1}}}).status().message(),
            "artifact decoding program: unknown knob 'stepz'");
  EXPECT_EQ(loadText(kKnobs, {{"steps", std::string("x")}}).status().message(),
            "artifact decoding program: knob 'steps' must be an integer");
}

// ---- Running ----------------------------------------------------------------------------------

class ConstantModel : public dlm::sampling::testing::FullCachedModel {
public:
  int64_t vocabSize() const override { return 4; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<sampling::LogitsView> runFull(const int32_t *, int64_t, int64_t,
                                         sampling::LogitRows rows) override {
    buffer_.assign(static_cast<size_t>(rows.count() * 4), 1.0f);
    return sampling::LogitsView{buffer_.data(), rows.count(), 4};
  }
  StatusOr<sampling::LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                           sampling::LogitRows rows) override {
    return runFull(tokens, count, keep, rows);
  }

private:
  std::vector<float> buffer_;
};

StatusOr<sampling::DecodeOutcome> runText(const std::string &text,
                                          const artifact::Attributes &knobs = {}) {
  StatusOr<DecodeProgram> loaded = loadText(text);
  if (!loaded)
    return loaded.status();
  ConstantModel model;
  ProgramRequest request;
  request.prompt = {1, 2};
  request.knobs = knobs;
  sampling::TokenFacts facts;
  facts.maskTokenId = 3;
  return DecodeInterpreter(*loaded).run(model, facts, request, {});
}

TEST(DecodeInterpreterTest, ADenoiseLoopThatOutrunsItsBoundFails) {
  const std::string text =
      program("denoise_loop cap=$n bound=3 base=0 -> index=%i global=%s ran=%r\n"
              "  until cond=false\n"
              "end\n"
              "add a=%step b=%r -> out=%step\n");
  // Stopping at the cap is normal; running out of the bound is not.
  StatusOr<sampling::DecodeOutcome> capped = runText(text, {{"n", int64_t{2}}});
  ASSERT_TRUE(capped.isOk()) << capped.status().message();
  EXPECT_EQ(capped->decodeSteps, 2);
  EXPECT_EQ(runText(text, {{"n", int64_t{-1}}}).status().message(),
            "decode record 3 ('denoise_loop'): denoise loop exceeded its bound of 3 steps");
  EXPECT_EQ(runText(text, {{"n", int64_t{5}}}).status().message(),
            "decode record 3 ('denoise_loop'): denoise loop exceeded its bound of 3 steps");
}

TEST(DecodeInterpreterTest, ChecksFailWithTheirMessageAndArithmeticFailsLoudly) {
  EXPECT_EQ(runText(program("gt a=$n b=3 -> out=%ok\n"
                            "check cond=%ok message=\"n {} is not above {} ({})\" arg0=$n arg1=3 "
                            "arg2=0.25\n"))
                .status()
                .message(),
            "n 2 is not above 3 (0.25)");
  EXPECT_EQ(runText(program("div a=$n b=0 -> out=%x\n")).status().message(),
            "decode record 3 ('div'): division by zero");
  EXPECT_EQ(runText(program("div a=1.5 b=0.0 -> out=%x\n")).status().message(),
            "decode record 3 ('div'): division by zero");
  EXPECT_EQ(runText(program("mul a=$n b=9223372036854775807 -> out=%x\n")).status().message(),
            "decode record 3 ('mul'): integer overflow");
  EXPECT_EQ(runText(program("sub a=-9223372036854775807 b=$n -> out=%x\n")).status().message(),
            "decode record 3 ('sub'): integer overflow");
  EXPECT_EQ(runText(program("window begin=0 end=1\n")).status().message(),
            "decode record 3 ('window'): a window of 1 rows passes the 0 reserved");
  EXPECT_EQ(runText(program("seq_extend count=1 fill=token token=0\n")).status().message(),
            "decode record 3 ('seq_extend'): the sequence grows before a 'reserve'");
}

// What a hostile artifact's program can ask for fails by name: no overflow, no huge allocation,
// no hang.
TEST(DecodeInterpreterTest, HostileProgramsFailByName) {
  EXPECT_EQ(runText(program("reserve tokens=4 rows=9223372036854775807\n")).status().message(),
            "decode record 3 ('reserve'): cannot reserve 4 tokens and 9223372036854775807 rows");
  EXPECT_EQ(runText(program("reserve tokens=8 rows=4\n"
                            "seq_extend count=9223372036854775807 fill=token token=0\n"))
                .status()
                .message(),
            "decode record 4 ('seq_extend'): extending 2 tokens by 9223372036854775807 passes "
            "the reserved 8");
  EXPECT_EQ(runText(program("block_loop count=9223372036854775807 -> index=%b\nend\n"))
                .status()
                .message(),
            "decode record 4 ('end'): the decode program ran 268435456 records without "
            "finishing");
  std::string nested;
  for (int i = 0; i < 65; ++i)
    nested += "if cond=true\n";
  for (int i = 0; i < 65; ++i)
    nested += "end\n";
  EXPECT_EQ(loadError(program(nested)),
            "decode record 67 ('if'): loops and ifs nest deeper than 64");
}

// The credit records refuse what would read or allocate out of bounds.
TEST(DecodeInterpreterTest, CreditRecordsFailByName) {
  const std::string window = "reserve tokens=8 rows=4\n"
                             "seq_extend count=2 fill=token token=3\n"
                             "window begin=2 end=4\n";
  EXPECT_EQ(runText(program(window + "credit_reset capacity=-1 -> out=%c\n")).status().message(),
            "decode record 6 ('credit_reset'): a credit capacity of -1 tokens is outside [0, "
            "65536]");
  EXPECT_EQ(runText(program(window + "credit_reset capacity=9223372036854775807 -> out=%c\n"))
                .status()
                .message(),
            "decode record 6 ('credit_reset'): a credit capacity of 9223372036854775807 tokens "
            "is outside [0, 65536]");
  const std::string forward = "forward mode=full count=4 keep=0 row_begin=2 row_end=4\n";
  const std::string credit = "credit credit=%c decay=1.0 gamma=0.2 alpha=0.7 candidates=masked\n";
  EXPECT_EQ(runText(program(window + "credit_reset capacity=2 -> out=%c\n" + credit))
                .status()
                .message(),
            "decode record 7 ('credit'): no decoded logits for the window's 2 rows");
  // Reset for another window.
  EXPECT_EQ(runText(program("reserve tokens=8 rows=4\n"
                            "seq_extend count=2 fill=token token=3\n"
                            "window begin=2 end=3\n"
                            "credit_reset capacity=2 -> out=%c\n"
                            "window begin=2 end=4\n" +
                            forward + credit))
                .status()
                .message(),
            "decode record 9 ('credit'): the credit was reset for 1 rows, not the window's 2");
  // A capacity of 1 holds one credited token per row: the constant model credits the same one
  // every step, a second token would not fit.
  EXPECT_TRUE(
      runText(program(window + "credit_reset capacity=1 -> out=%c\n" + forward + credit + forward +
                      credit))
          .isOk());
  EXPECT_EQ(runText(program(window + "credit_reset capacity=0 -> out=%c\n" + forward + credit))
                .status()
                .message(),
            "decode record 8 ('credit'): row 0 credits more than its capacity of 0 tokens");
  EXPECT_EQ(runText(program(window + "credit_reset capacity=1 -> out=%c\n" + forward +
                            "credit credit=%c decay=1.5 gamma=0.2 alpha=0.7 candidates=masked\n"))
                .status()
                .message(),
            "decode record 8 ('credit'): credit needs a decay in [0, 1] and a finite gamma and "
            "alpha");
  // The loader: a credit must exist, and be a credit.
  EXPECT_EQ(loadError(program(credit)), "decode record 3 ('credit'): undefined register '%c'");
  EXPECT_EQ(loadError(program("fill_row value=0.5 -> out=%c\n" + credit)),
            "decode record 4 ('credit'): parameter 'credit' must be credit, but '%c' is reals");
}

// A model that records its window forwards.
class WindowModel : public ConstantModel {
public:
  struct Window {
    int64_t count, feedBegin, feedEnd, rowBegin, rowEnd;
  };
  std::vector<Window> windows;
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &spec) override {
    if (spec.mode != sampling::ForwardSpec::Mode::window)
      return ConstantModel::forward(spec);
    windows.push_back({spec.count, spec.first, spec.end, spec.rows.begin, spec.rows.end});
    return forwardFull(spec.tokens, spec.count, spec.count, spec.rows);
  }
};

// mode=window feeds [keep, feed_end) over the cache of [0, count) and returns the absolute rows
// relative to the fed tokens; rows outside what it feeds, and a model without window forwards,
// fail by name.
TEST(DecodeInterpreterTest, WindowForwardsFeedTheirRange) {
  const std::string text = program("reserve tokens=8 rows=4\n"
                                   "seq_extend count=4 fill=token token=3\n"
                                   "forward mode=full count=6 keep=6 row_begin=2 row_end=6\n"
                                   "add a=$n b=1 -> out=%rowBegin\n"
                                   "forward mode=window count=6 keep=2 feed_end=5 "
                                   "row_begin=%rowBegin row_end=5\n");
  StatusOr<DecodeProgram> loaded = loadText(text);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  ProgramRequest request;
  request.prompt = {1, 2};
  sampling::TokenFacts facts;
  facts.maskTokenId = 3;
  WindowModel model;
  StatusOr<sampling::DecodeOutcome> out = DecodeInterpreter(*loaded).run(model, facts, request, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->forwards, 2);
  ASSERT_EQ(model.windows.size(), 1u);
  const WindowModel::Window &w = model.windows[0];
  EXPECT_EQ(std::vector<int64_t>({w.count, w.feedBegin, w.feedEnd, w.rowBegin, w.rowEnd}),
            std::vector<int64_t>({6, 2, 5, 1, 3}));
  request.knobs = {{"n", int64_t{0}}};
  EXPECT_EQ(DecodeInterpreter(*loaded).run(model, facts, request, {}).status().message(),
            "decode record 7 ('forward'): forward of 6 tokens keeping 2 and feeding [2, 5) cannot "
            "return rows [1, 5) of a sequence of 6");
  EXPECT_EQ(runText(text).status().message(),
            "not supported yet: window forwards (the dual cache) on this model");
}

TEST(DecodeInterpreterTest, LoopsBranchesAndExitsRunAsWritten) {
  // Three blocks of two steps each, the second block's exit_if leaving after it: 4 steps.
  const std::string text =
      program("block_loop count=3 -> index=%b\n"
              "  denoise_loop cap=-1 bound=5 base=%step -> index=%i global=%s ran=%r\n"
              "    if cond=$flag\n"
              "      eq a=%i b=0 -> out=%done\n"
              "    else\n"
              "      eq a=%i b=1 -> out=%done\n"
              "    end\n"
              "    until cond=%done\n"
              "  end\n"
              "  add a=%step b=%r -> out=%step\n"
              "  eq a=%b b=1 -> out=%second\n"
              "  exit_if cond=%second\n"
              "end\n");
  StatusOr<sampling::DecodeOutcome> out = runText(text);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->decodeSteps, 4);
  out = runText(text, {{"flag", true}});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->decodeSteps, 2);
  EXPECT_EQ(out->outputIds.size(), 0u); // the prompt only
}

// T_n = t_min + (t_max - t_min) * double(S - n) / double(S), bit for bit as EntropyBound.cpp
// evaluates it (the interpreter is built without FMA contraction).
TEST(DecodeInterpreterTest, HostArithmeticRoundsLikeTheCppExpression) {
  const std::string text = "knob:t_min type=real default=0.4\n"
                           "knob:t_max type=real default=0.8\n"
                           "knob:s type=int default=1\n"
                           "knob:n type=int default=0\n"
                           "knob:expected type=real default=0.0\n"
                           "sub a=$s b=$n -> out=%r\n"
                           "to_real a=%r -> out=%rf\n"
                           "to_real a=$s -> out=%sf\n"
                           "sub a=$t_max b=$t_min -> out=%d\n"
                           "mul a=%d b=%rf -> out=%m\n"
                           "div a=%m b=%sf -> out=%q\n"
                           "add a=$t_min b=%q -> out=%T\n"
                           "eq a=%T b=$expected -> out=%same\n"
                           "check cond=%same message=\"T {} differs\" arg0=%T\n"
                           "finish steps=0\n";
  for (const auto &[tMin, tMax] : {std::pair{0.4, 0.8}, std::pair{0.1, 1.7}, std::pair{0.3, 0.31}})
    for (int64_t steps : {3, 7, 48})
      for (int64_t n = 0; n < steps; ++n) {
        volatile double lo = tMin, hi = tMax; // keep the compiler from folding the oracle
        const double expected =
            lo + (hi - lo) * static_cast<double>(steps - n) / static_cast<double>(steps);
        StatusOr<sampling::DecodeOutcome> out = runText(
            text,
            {{"t_min", tMin}, {"t_max", tMax}, {"s", steps}, {"n", n}, {"expected", expected}});
        EXPECT_TRUE(out.isOk()) << out.status().message() << " S=" << steps << " n=" << n;
      }
}

// precision=f32: T_n = f32(t_min) + f32(f32(t_max - t_min) * f32(f32(S - n) / f32(S))), bit for
// bit as torch evaluates DiffusionGemma's temperature (docs/design/diffusion-gemma.md §6.3), which
// is not the double formula rounded once at the end.
TEST(DecodeInterpreterTest, Float32ArithmeticRoundsEveryOperation) {
  const std::string text = "knob:t_min type=real default=0.4\n"
                           "knob:t_max type=real default=0.8\n"
                           "knob:s type=int default=1\n"
                           "knob:n type=int default=0\n"
                           "knob:expected type=real default=0.0\n"
                           "sub a=$s b=$n -> out=%r\n"
                           "to_real a=%r precision=f32 -> out=%rf\n"
                           "to_real a=$s precision=f32 -> out=%sf\n"
                           "sub a=$t_max b=$t_min -> out=%d\n"
                           "div a=%rf b=%sf precision=f32 -> out=%q\n"
                           "mul a=%d b=%q precision=f32 -> out=%m\n"
                           "add a=$t_min b=%m precision=f32 -> out=%T\n"
                           "eq a=%T b=$expected -> out=%same\n"
                           "check cond=%same message=\"T {} differs\" arg0=%T\n"
                           "finish steps=0\n";
  int roundedOnceDiffers = 0;
  for (int64_t steps : {12, 16, 48})
    for (int64_t n = 0; n < steps; ++n) {
      volatile double lo = 0.4, hi = 0.8; // keep the compiler from folding the oracle
      const float fraction = static_cast<float>(steps - n) / static_cast<float>(steps);
      const float expected = static_cast<float>(lo) +
                             static_cast<float>(hi - lo) * fraction;
      const double inDouble =
          lo + (hi - lo) * (static_cast<double>(steps - n) / static_cast<double>(steps));
      roundedOnceDiffers += static_cast<float>(inDouble) != expected;
      StatusOr<sampling::DecodeOutcome> out =
          runText(text, {{"s", steps}, {"n", n}, {"expected", static_cast<double>(expected)}});
      EXPECT_TRUE(out.isOk()) << out.status().message() << " S=" << steps << " n=" << n;
    }
  EXPECT_GT(roundedOnceDiffers, 0);
  // Only real arithmetic has a float32 form.
  EXPECT_EQ(loadError("add a=1 b=2 precision=f32 -> out=%x\nfinish steps=0\n"),
            "decode record 0 ('add'): precision=f32 needs real operands");
  EXPECT_EQ(loadError("sample kind=gumbel_max precision=f32 temperature=0.0 excluded=-1 step=0 "
                      "candidates=all -> token=%t confidence=%c\nfinish steps=0\n"),
            "decode record 0 ('sample'): precision=f32 is only for kind=tempered");
  EXPECT_EQ(loadError("fill_row value=0.5 -> out=%score\n"
                      "accept rule=top_k k=1 precision=f32 candidates=all score=%score "
                      "-> keep=%keep\nfinish steps=0\n"),
            "decode record 1 ('accept'): precision=f32 is only for rule=entropy_bound, "
            "rule=threshold_quota or converge=stable_confident");
}

// Registers and scratch are sized by `reserve`: a request's allocations do not grow with the
// number of denoising steps it runs.
TEST(DecodeInterpreterTest, NoStepAllocates) {
  auto allocations = [](const char *input, const artifact::Attributes &knobs) {
    StatusOr<DecodeProgram> loaded = loadText(testing::readDecodeProgramText(input));
    EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
    ConstantModel model; // uniform logits: entropy-bound never converges early
    ProgramRequest request;
    request.prompt = {1, 2};
    request.knobs = knobs;
    sampling::TokenFacts facts;
    facts.maskTokenId = 3;
    const DecodeInterpreter interpreter(*loaded);
    EXPECT_TRUE(interpreter.run(model, facts, request, {}).isOk()); // the model's buffer
    gAllocations = 0;
    gCounting = true;
    StatusOr<sampling::DecodeOutcome> out = interpreter.run(model, facts, request, {});
    gCounting = false;
    EXPECT_TRUE(out.isOk()) << out.status().message();
    return std::pair<int64_t, int64_t>(gAllocations.load(), out->decodeSteps);
  };
  const artifact::Attributes fewLc = {
      {"gen_length", int64_t{16}}, {"block_length", int64_t{8}}, {"steps", int64_t{2}}};
  const artifact::Attributes manyLc = {
      {"gen_length", int64_t{16}}, {"block_length", int64_t{8}}, {"steps", int64_t{16}}};
  const auto [fewLcAllocations, fewLcSteps] = allocations("low-confidence.decode", fewLc);
  const auto [manyLcAllocations, manyLcSteps] = allocations("low-confidence.decode", manyLc);
  EXPECT_EQ(fewLcSteps, 2);
  EXPECT_EQ(manyLcSteps, 16);
  EXPECT_GT(fewLcAllocations, 0); // the counter counts
  EXPECT_EQ(fewLcAllocations, manyLcAllocations);
  // Credit decoding allocates its credit and fused logits once, whatever the steps.
  artifact::Attributes fewCredit = fewLc, manyCredit = manyLc;
  fewCredit["credit"] = manyCredit["credit"] = true;
  const auto [fewCreditAllocations, fewCreditSteps] =
      allocations("low-confidence.decode", fewCredit);
  const auto [manyCreditAllocations, manyCreditSteps] =
      allocations("low-confidence.decode", manyCredit);
  EXPECT_EQ(fewCreditSteps, 2);
  EXPECT_EQ(manyCreditSteps, 16);
  EXPECT_EQ(fewCreditAllocations, manyCreditAllocations);
  const artifact::Attributes fewEb = {
      {"gen_length", int64_t{16}}, {"max_steps", int64_t{2}}, {"noise", std::string("uniform")}};
  const artifact::Attributes manyEb = {
      {"gen_length", int64_t{16}}, {"max_steps", int64_t{30}}, {"noise", std::string("uniform")}};
  const auto [fewEbAllocations, fewEbSteps] = allocations("entropy-bound.decode", fewEb);
  const auto [manyEbAllocations, manyEbSteps] = allocations("entropy-bound.decode", manyEb);
  EXPECT_EQ(fewEbSteps, 4);
  EXPECT_EQ(manyEbSteps, 60);
  EXPECT_EQ(fewEbAllocations, manyEbAllocations);
}

} // namespace
} // namespace dlm::program
