// Records on the token sequence: sizes, growth and truncation, the window, row fills and writes,
// the K/V cache's length, committing and finishing.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/CounterRng.h"

#include <algorithm>

namespace dlm::program::detail {

namespace dspec = spec::decode;

Status runReserve(State &state, const Instruction &in, size_t at) {
  using namespace dspec::reserve_params;
  const int64_t tokens = state.integer(in[kTokens]);
  const int64_t rows = state.integer(in[kRows]);
  // A forward never returns more rows than it is fed tokens.
  if (tokens < static_cast<int64_t>(state.seq.size()) || rows < 0 || rows > tokens)
    return state.error(at, "cannot reserve " + std::to_string(tokens) + " tokens and " +
                               std::to_string(rows) + " rows");
  const ProgramRequest &request = state.request;
  if (request.maxTokens > 0 && tokens > request.maxTokens)
    return Status::error(StatusCode::contextLengthExceeded, "prompt too long: " + std::to_string(state.promptLength) +
                         " prompt tokens and " + std::to_string(tokens - state.promptLength) +
                         " to generate need " + std::to_string(tokens) + " positions; " +
                         request.maxTokensLimit);
  // A pending first-logits capture brings back every row of a forward.
  DLM_RETURN_IF_ERROR(
      state.model.reserve(tokens, state.request.captureFirstLogits ? tokens : rows));
  // Reserving may reallocate the model's logits: the last forward's rows are gone.
  state.hasLogits = false;
  state.reservedTokens = tokens;
  state.reservedRows = rows;
  const size_t n = static_cast<size_t>(rows);
  state.seq.reserve(static_cast<size_t>(tokens));
  for (size_t r = 0; r < state.registers.size(); ++r) {
    Register &reg = state.registers[r];
    switch (state.program.registers()[r].type) {
    case ValueType::tokens:
      reg.tokens.reserve(n);
      break;
    case ValueType::reals:
      reg.reals.reserve(n);
      break;
    case ValueType::flags:
      reg.flags.reserve(n);
      break;
    default:
      break;
    }
  }
  for (std::vector<int64_t> *scratch : {&state.candidateRows, &state.positions, &state.order})
    scratch->reserve(n);
  state.segments.reserve(4 * n);
  state.scores.reserve(n);
  state.accepted.reserve(n);
  return Status::ok();
}

Status runSeqExtend(State &state, const Instruction &in, size_t at) {
  using namespace dspec::seq_extend_params;
  const int64_t count = state.integer(in[kCount]);
  const int64_t size = static_cast<int64_t>(state.seq.size());
  if (state.reservedTokens < 0)
    return state.error(at, "the sequence grows before a 'reserve'");
  if (count < 0 || count > state.reservedTokens - size)
    return state.error(at, "extending " + std::to_string(size) + " tokens by " +
                               std::to_string(count) + " passes the reserved " +
                               std::to_string(state.reservedTokens));
  const int fill = state.choice(in[kFill], dspec::kSeqExtendParams[kFill].choices);
  if (fill < 0)
    return state.error(at, "unknown fill '" + state.text(in[kFill]) + "'");
  if (fill != kFillNoise) {
    const int64_t token = in[kToken].given() ? state.integer(in[kToken]) : 0;
    state.seq.insert(state.seq.end(), static_cast<size_t>(count), static_cast<int32_t>(token));
    return Status::ok();
  }
  const uint64_t stream =
      static_cast<uint64_t>(in[kStream].given() ? state.integer(in[kStream]) : 0);
  const uint64_t step = static_cast<uint64_t>(in[kStep].given() ? state.integer(in[kStep]) : 0);
  const uint64_t stepKey =
      sampling::rng::stepKey(state.request.seed, state.request.request, stream, step);
  const std::vector<int32_t> &given = state.request.initialNoise;
  if (!given.empty() && !state.initialNoiseUsed) {
    // The caller's first canvas replaces the first noise draw, whole.
    if (static_cast<int64_t>(given.size()) != count)
      return state.error(at, "the initial canvas has " + std::to_string(given.size()) +
                                 " tokens; the canvas has " + std::to_string(count));
    for (int32_t token : given)
      if (token < 0 || token >= state.vocab)
        return state.error(at, "initial canvas token " + std::to_string(token) +
                                   " is outside the vocabulary [0, " +
                                   std::to_string(state.vocab) + ")");
    state.seq.insert(state.seq.end(), given.begin(), given.end());
    state.initialNoiseUsed = true;
    return Status::ok();
  }
  const ProgramTestHooks *hooks = state.request.testHooks;
  for (int64_t p = size; p < size + count; ++p)
    state.seq.push_back(
        hooks && hooks->noiseToken
            ? hooks->noiseToken(static_cast<int64_t>(step), p)
            : static_cast<int32_t>(sampling::rng::randomToken(
                  sampling::rng::positionKey(stepKey, p), state.vocab)));
  return Status::ok();
}

Status runWindow(State &state, const Instruction &in, size_t at) {
  using namespace dspec::window_params;
  const int64_t begin = state.integer(in[kBegin]);
  const int64_t end = state.integer(in[kEnd]);
  if (begin < 0 || begin > end || end > static_cast<int64_t>(state.seq.size()))
    return state.error(at, "window [" + std::to_string(begin) + ", " + std::to_string(end) +
                               ") is outside the sequence of " + std::to_string(state.seq.size()) +
                               " tokens");
  if (end - begin > state.reservedRows)
    return state.error(at, "a window of " + std::to_string(end - begin) + " rows passes the " +
                               std::to_string(state.reservedRows) + " reserved");
  state.windowBegin = begin;
  state.windowEnd = end;
  return Status::ok();
}

Status runSeqTruncate(State &state, const Instruction &in, size_t at) {
  const int64_t length = state.integer(in[dspec::seq_truncate_params::kLength]);
  const int64_t size = static_cast<int64_t>(state.seq.size());
  if (length < state.promptLength || length > size)
    return state.error(at, "cannot truncate the sequence of " + std::to_string(size) +
                               " tokens to " + std::to_string(length) + " (the prompt has " +
                               std::to_string(state.promptLength) + ")");
  state.seq.resize(static_cast<size_t>(length));
  state.windowEnd = std::min(state.windowEnd, length);
  state.windowBegin = std::min(state.windowBegin, state.windowEnd);
  return Status::ok();
}

Status runSeqWrite(State &state, const Instruction &in, size_t at) {
  StatusOr<const std::vector<int32_t> *> tokens =
      state.tokensRow(in[dspec::seq_write_params::kTokens], at);
  if (!tokens)
    return tokens.status();
  for (int64_t j = 0; j < state.rows(); ++j) {
    const int32_t token = (**tokens)[static_cast<size_t>(j)];
    if (token < 0 || token >= state.vocab)
      return state.error(at, "token " + std::to_string(token) +
                                 " is outside the vocabulary [0, " + std::to_string(state.vocab) +
                                 ")");
    state.seq[static_cast<size_t>(state.windowBegin + j)] = token;
  }
  return Status::ok();
}

Status runKvTrim(State &state, const Instruction &in, size_t at) {
  Status trimmed = state.model.trimCache(state.integer(in[dspec::kv_trim_params::kLength]));
  return trimmed.isOk() ? trimmed : state.error(at, trimmed.message());
}

Status runCountEq(State &state, const Instruction &in, size_t) {
  using namespace dspec::count_eq_params;
  const int64_t value = state.integer(in[kValue]);
  state.reg(in[kOut]).scalar.integer =
      std::count_if(state.seq.begin() + state.windowBegin, state.seq.begin() + state.windowEnd,
                    [&](int32_t token) { return token == value; });
  return Status::ok();
}

Status runFillRow(State &state, const Instruction &in, size_t) {
  using namespace dspec::fill_row_params;
  Register &out = state.reg(in[kOut]);
  const size_t rows = static_cast<size_t>(state.rows());
  switch (in[kValue].type) {
  case ValueType::integer:
    out.tokens.assign(rows, static_cast<int32_t>(state.integer(in[kValue])));
    break;
  case ValueType::real:
    out.reals.assign(rows, state.real(in[kValue]));
    break;
  default:
    out.flags.assign(rows, state.boolean(in[kValue]) ? 1 : 0);
    break;
  }
  return Status::ok();
}

Status runCommit(State &state, const Instruction &in, size_t at) {
  using namespace dspec::commit_params;
  const int64_t begin = state.integer(in[kBegin]);
  const int64_t end = state.integer(in[kEnd]);
  if (begin < 0 || begin > end || end > static_cast<int64_t>(state.seq.size()))
    return state.error(at, "committed block [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") is outside the sequence");
  ++state.outcome.blocks;
  state.reg(in[kEos]).scalar.boolean = sampling::reportBlock(
      state.seq, begin, end, state.integer(in[kIndex]), state.boolean(in[kLast]), state.facts,
      state.onBlock);
  return Status::ok();
}

Status runFinish(State &state, const Instruction &in, size_t) {
  using namespace dspec::finish_params;
  state.outcome.decodeSteps = state.integer(in[kSteps]);
  sampling::finishOutput(state.seq, static_cast<size_t>(state.promptLength), state.facts,
                         state.outcome);
  return Status::ok();
}

} // namespace dlm::program::detail
