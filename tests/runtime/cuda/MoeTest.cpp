// The moe record's kernels on the emulated device, launched in sequence as the cuda backend
// launches them (CudaBackend::enqueueMoe: route, plan, gate_up, down, combine), against a
// double-precision reference of the record (runtime/model/KernelProgram.h, kind moe) written
// here: z = rms_norm_noweight(r) * router_scale * router_input_scale (DiffusionGemma's router
// norm; z = r without it, Qwen3-MoE's), p = softmax(z @ router^T), the top_k by p (ties: the
// lower expert id), weights renormalised (or not) and times expert_scale (when given), and
// y = sum of weight_e * down_e(act(gate_e x) * up_e x), act gelu_tanh or SiLU. f32 weights and
// activations. The configurations without the router norm pass no scales (null pointers); those
// with sigmoid scores (LLaDA2's routing) pass a random expert bias, which only chooses, and
// limit the choice to the best groups (a group scores the sum of its two largest), with the
// weights times a routed scale.
// Besides y, the routing (choice exactly, weight closely) and the plan's per-expert lists
// (ascending slots, counts) are checked. Ties: router rows in identical pairs (a tie straddling
// the k-th place picks the lower id), and an all-zero router input (every expert ties: experts
// 0 .. k-1). Token counts cover one token, a few, and more than one row tile of 64 for an
// expert's list; r, x and y have padded strides whose padding must stay untouched.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

struct MoeWeights {
  std::vector<float> router;      // [E, H]
  std::vector<float> routerScale; // [H]
  std::vector<float> expertScale; // [E]
  std::vector<float> expertBias;  // [E]
  std::vector<float> gateUp;      // [E, 2I, H]
  std::vector<float> down;        // [E, H, I]
  float eps = 1e-6f;
  float inputScale = 1.f;
  float routedScale = 1.f;
};

struct Routing {
  std::vector<int> choice;     // [k], in the order the router picks them (by p, ties by id)
  std::vector<double> weight;  // [k]
  bool ambiguous = false;      // the k-th and the next p differ by less than float rounding
};

// The reference routing of one token's router input row.
Routing routeReference(const codegen::MoeParams &params, const MoeWeights &w, const float *r) {
  const int H = static_cast<int>(params.hidden), E = static_cast<int>(params.experts),
            k = static_cast<int>(params.topK);
  double sumSquares = 0;
  for (int h = 0; h < H; ++h)
    sumSquares += static_cast<double>(r[h]) * r[h];
  const double rowScale = 1.0 / std::sqrt(sumSquares / H + w.eps);
  std::vector<double> z(r, r + H);
  if (params.routerNorm)
    for (int h = 0; h < H; ++h)
      z[h] = r[h] * rowScale * w.routerScale[h] * static_cast<double>(w.inputScale);
  std::vector<double> p(E);
  for (int e = 0; e < E; ++e) {
    double dot = 0;
    for (int h = 0; h < H; ++h)
      dot += z[h] * w.router[static_cast<size_t>(e) * H + h];
    p[e] = dot;
  }
  if (params.sigmoidScores) {
    for (double &value : p)
      value = 1.0 / (1.0 + std::exp(-value));
  } else {
    const double maximum = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double &value : p)
      sum += value = std::exp(value - maximum);
    for (double &value : p)
      value /= sum;
  }
  // c chooses: the score plus the bias, -inf outside the best groups.
  std::vector<double> c(p);
  for (int e = 0; e < E && !w.expertBias.empty(); ++e)
    c[e] += w.expertBias[e];
  const int groups = static_cast<int>(params.groups), size = E / groups;
  Routing routing;
  if (groups > 1) {
    std::vector<double> groupScore(groups);
    for (int g = 0; g < groups; ++g) {
      std::vector<double> members(c.begin() + g * size, c.begin() + (g + 1) * size);
      std::sort(members.rbegin(), members.rend());
      groupScore[g] = members[0] + members[1];
    }
    std::vector<int> byScore(groups);
    std::iota(byScore.begin(), byScore.end(), 0);
    std::stable_sort(byScore.begin(), byScore.end(),
                     [&](int a, int b) { return groupScore[a] > groupScore[b]; });
    const double last = groupScore[byScore[params.topGroups - 1]];
    if (params.topGroups < groups &&
        last - groupScore[byScore[params.topGroups]] < 1e-4 * std::abs(last))
      routing.ambiguous = true;
    for (int j = static_cast<int>(params.topGroups); j < groups; ++j)
      for (int e = byScore[j] * size; e < (byScore[j] + 1) * size; ++e)
        c[e] = -std::numeric_limits<double>::infinity();
  }
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
  routing.choice.assign(order.begin(), order.begin() + k);
  double chosen = 0;
  for (int j = 0; j < k; ++j)
    chosen += p[order[j]];
  for (int j = 0; j < k; ++j)
    routing.weight.push_back((params.normalizeTopK ? p[order[j]] / chosen : p[order[j]]) *
                             (w.expertScale.empty() ? 1.0 : w.expertScale[order[j]]) *
                             w.routedScale);
  // Neighbours in the order that are not exact ties (identical router rows give identical p in
  // both precisions) but closer than the kernel's float arithmetic can tell apart.
  for (int j = 0; j + 1 < E; ++j) {
    const double a = c[order[j]], b = c[order[j + 1]];
    if (a != b && std::isfinite(b) && a - b < 1e-4 * std::abs(a))
      routing.ambiguous = true;
  }
  return routing;
}

double activate(codegen::Activation activation, double g) {
  return activation == codegen::Activation::silu
             ? g / (1.0 + std::exp(-g))
             : 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// y for one token: sum over its experts of weight * down_e(act(gate_e x) * up_e x).
std::vector<double> moeReference(const codegen::MoeParams &params, const MoeWeights &w,
                                 const Routing &routing, const float *x) {
  const int H = static_cast<int>(params.hidden), I = static_cast<int>(params.expertWidth);
  std::vector<double> y(H, 0.0), act(I);
  for (size_t j = 0; j < routing.choice.size(); ++j) {
    const int e = routing.choice[j];
    const float *gateUp = w.gateUp.data() + static_cast<size_t>(e) * 2 * I * H;
    const float *down = w.down.data() + static_cast<size_t>(e) * H * I;
    for (int n = 0; n < I; ++n) {
      double gate = 0, up = 0;
      for (int h = 0; h < H; ++h) {
        gate += static_cast<double>(gateUp[static_cast<size_t>(n) * H + h]) * x[h];
        up += static_cast<double>(gateUp[static_cast<size_t>(I + n) * H + h]) * x[h];
      }
      act[n] = activate(params.activation, gate) * up;
    }
    for (int h = 0; h < H; ++h) {
      double value = 0;
      for (int n = 0; n < I; ++n)
        value += down[static_cast<size_t>(h) * I + n] * act[n];
      y[h] += routing.weight[j] * value;
    }
  }
  return y;
}

std::vector<float> uniformValues(std::mt19937 &random, size_t count, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(random);
  return values;
}

void checkMoe(const codegen::MoeParams &params, std::mt19937 &random, int tokens,
              bool pairedRouterRows) {
  const int H = static_cast<int>(params.hidden), E = static_cast<int>(params.experts),
            k = static_cast<int>(params.topK), I = static_cast<int>(params.expertWidth);
  const codegen::KernelSource route = *codegen::generateMoeRoute(params);
  const codegen::KernelSource plan = *codegen::generateMoePlan(params);
  const codegen::KernelSource gateUpKernel = *codegen::generateMoeExperts(params, true);
  const codegen::KernelSource downKernel = *codegen::generateMoeExperts(params, false);
  const codegen::KernelSource combine = *codegen::generateMoeCombine(params);

  MoeWeights w;
  w.router = uniformValues(random, static_cast<size_t>(E) * H, -1.f, 1.f);
  if (pairedRouterRows)
    for (int e = 1; e < E; e += 2)
      std::copy_n(w.router.begin() + static_cast<long>(e - 1) * H, H,
                  w.router.begin() + static_cast<long>(e) * H);
  if (params.routerNorm) {
    w.routerScale = uniformValues(random, H, 0.5f, 1.5f);
    w.expertScale = uniformValues(random, E, 0.5f, 1.5f);
  }
  if (params.sigmoidScores) {
    w.expertBias = uniformValues(random, E, -0.3f, 0.3f);
    w.routedScale = 2.5f;
  }
  const float weightRange = 1.f / std::sqrt(static_cast<float>(H));
  w.gateUp = uniformValues(random, static_cast<size_t>(E) * 2 * I * H, -weightRange, weightRange);
  w.down = uniformValues(random, static_cast<size_t>(E) * H * I, -1.f / std::sqrt(float(I)),
                         1.f / std::sqrt(float(I)));
  w.inputScale = 1.f / std::sqrt(static_cast<float>(H));

  // r and x with padded rows; padding NaN (never read). Token 0 of a multi-token trial has an
  // all-zero router input: every expert ties.
  const long long rowStride = H + 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> r(static_cast<size_t>(tokens * rowStride), nan), x = r;
  std::vector<Routing> routing(tokens);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int t = 0; t < tokens; ++t) {
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 100) << "no unambiguous router input found";
      for (int h = 0; h < H; ++h)
        r[t * rowStride + h] = tokens > 1 && t == 0 ? 0.f : 2.f * normal(random);
      routing[t] = routeReference(params, w, r.data() + t * rowStride);
      if (!routing[t].ambiguous)
        break;
    }
    for (int h = 0; h < H; ++h)
      x[t * rowStride + h] = normal(random);
  }

  const int slots = tokens * k;
  std::vector<int> choice(slots, -7), lists(static_cast<size_t>(E) * tokens, -7), counts(E, -7);
  std::vector<float> weight(slots, nan), act(static_cast<size_t>(slots) * I, nan),
      out(static_cast<size_t>(slots) * H, nan);
  const long long yStride = H + 2;
  const float sentinel = -12345.f;
  std::vector<float> y(static_cast<size_t>(tokens * yStride), sentinel);

  const emu::Device &device = emulatedDevice();
  const unsigned rowBlocks = static_cast<unsigned>((tokens + 63) / 64);
  {
    auto orNull = [](const std::vector<float> &v) { return v.empty() ? nullptr : v.data(); };
    const float *rArg = r.data(), *routerArg = w.router.data(),
                *routerScaleArg = orNull(w.routerScale), *expertScaleArg = orNull(w.expertScale),
                *expertBiasArg = orNull(w.expertBias);
    int *choiceArg = choice.data();
    float *weightArg = weight.data();
    ASSERT_TRUE(launched(device.launchArgs(
        route.name, emu::Dim3{static_cast<unsigned>(tokens)}, emu::Dim3{route.blockThreads}, rArg,
        rowStride, tokens, routerArg, routerScaleArg, expertScaleArg, expertBiasArg, w.eps,
        w.inputScale, w.routedScale, choiceArg, weightArg)));
  }
  {
    const int *choiceArg = choice.data();
    int *listsArg = lists.data(), *countsArg = counts.data();
    ASSERT_TRUE(launched(device.launchArgs(plan.name, emu::Dim3{1}, emu::Dim3{plan.blockThreads},
                                           choiceArg, tokens, listsArg, countsArg)));
  }
  {
    const float *xArg = x.data(), *gateUpArg = w.gateUp.data();
    const int *listsArg = lists.data(), *countsArg = counts.data();
    float *actArg = act.data();
    ASSERT_TRUE(launched(device.launchArgs(
        gateUpKernel.name,
        emu::Dim3{static_cast<unsigned>((I + 63) / 64), rowBlocks, static_cast<unsigned>(E)},
        emu::Dim3{gateUpKernel.blockThreads}, xArg, rowStride, gateUpArg, tokens, listsArg,
        countsArg, actArg)));
  }
  {
    const float *actArg = act.data(), *downArg = w.down.data();
    const long long actStride = I;
    const int *listsArg = lists.data(), *countsArg = counts.data();
    float *outArg = out.data();
    ASSERT_TRUE(launched(device.launchArgs(
        downKernel.name,
        emu::Dim3{static_cast<unsigned>((H + 63) / 64), rowBlocks, static_cast<unsigned>(E)},
        emu::Dim3{downKernel.blockThreads}, actArg, actStride, downArg, tokens, listsArg, countsArg,
        outArg)));
  }
  {
    const int *choiceArg = choice.data();
    const float *weightArg = weight.data(), *outArg = out.data();
    float *yArg = y.data();
    ASSERT_TRUE(launched(device.launchArgs(combine.name, emu::Dim3{static_cast<unsigned>(tokens)},
                                           emu::Dim3{combine.blockThreads}, choiceArg, weightArg,
                                           outArg, tokens, yArg, yStride)));
  }

  // Routing: the same experts in the same order, close weights.
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const std::string where = "token " + std::to_string(t) + " choice " + std::to_string(j);
      ASSERT_EQ(choice[t * k + j], routing[t].choice[j]) << where;
      ASSERT_TRUE(near(weight[t * k + j], routing[t].weight[j], 1e-6, 1e-5, where + " weight"));
    }
  if (tokens > 1 && !params.sigmoidScores) // the all-zero router input: experts 0 .. k-1
                                           // (with or without the router norm: its eps keeps a
                                           // zero row zero; the bias decides otherwise)
    for (int j = 0; j < k; ++j)
      ASSERT_EQ(choice[j], j) << "all experts tie: the lower ids first";
  // The plan: each expert's slots, ascending.
  for (int e = 0; e < E; ++e) {
    std::vector<int> want;
    for (int s = 0; s < slots; ++s)
      if (choice[s] == e)
        want.push_back(s);
    ASSERT_EQ(counts[e], static_cast<int>(want.size())) << "expert " << e;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(lists[static_cast<size_t>(e) * tokens + i], want[i]) << "expert " << e;
  }
  // y against the double reference; the padding untouched.
  for (int t = 0; t < tokens; ++t) {
    const std::vector<double> want =
        moeReference(params, w, routing[t], x.data() + t * rowStride);
    for (int h = 0; h < H; ++h)
      ASSERT_TRUE(near(y[t * yStride + h], want[h], 2e-5, 1e-4,
                       "token " + std::to_string(t) + " column " + std::to_string(h)));
    for (long long h = H; h < yStride; ++h)
      ASSERT_EQ(y[t * yStride + h], sentinel) << "token " << t << ": wrote padding column " << h;
  }
}

TEST(MoeKernels, RouteThroughCombineMatchDoubleReference) {
  std::mt19937 random(77);
  for (const codegen::MoeParams &params : moeConfigs()) {
    struct Trial {
      int tokens;
      bool pairedRouterRows;
    };
    for (const Trial trial : {Trial{1, false}, Trial{randomInt(random, 2, 9), false},
                              Trial{randomInt(random, 10, 30), true}, Trial{70, true}}) {
      SCOPED_TRACE(testing::Message()
                   << "hidden " << params.hidden << " experts " << params.experts << " top "
                   << params.topK << " width " << params.expertWidth
                   << (params.routerNorm ? "" : ", plain router")
                   << (params.normalizeTopK ? "" : ", unnormalised")
                   << (params.sigmoidScores ? ", sigmoid scores" : "") << ", groups "
                   << params.topGroups << " of " << params.groups << ", " << trial.tokens
                   << " tokens" << (trial.pairedRouterRows ? ", paired router rows" : ""));
      checkMoe(params, random, trial.tokens, trial.pairedRouterRows);
      if (HasFatalFailure())
        return;
    }
  }
}

// The reference's tie rule on a hand-built router: identical rows tie, the lower id first.
TEST(MoeReference, TiesPickTheLowerExpertId) {
  const codegen::MoeParams params{2, 4, 2, 1, codegen::ElementType::f32};
  MoeWeights w;
  w.router = {0.f, 0.f, 1.f, 1.f, 1.f, 1.f, -1.f, 0.f}; // experts 1 and 2 tie on top
  w.routerScale = {1.f, 1.f};
  w.expertScale = {1.f, 1.f, 1.f, 2.f};
  const std::vector<float> r{1.f, 1.f};
  const Routing routing = routeReference(params, w, r.data());
  ASSERT_EQ(routing.choice, (std::vector<int>{1, 2}));
  EXPECT_NEAR(routing.weight[0], 0.5, 1e-12);
  EXPECT_NEAR(routing.weight[1], 0.5, 1e-12);
  EXPECT_FALSE(routing.ambiguous);
}

} // namespace
