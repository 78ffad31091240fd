#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"
#include "csrc/moe/grouped_gemm_sm90.h"
#include "csrc/moe/stream_gate_up_wgmma.h"

namespace hpc {
namespace {

Status ValidateScale(const ArgCheck& c, const char* name, const TensorView& s, std::initializer_list<int64_t> dims,
                     const char* layout, const TensorView& ref) {
  // the layout and its numbers for this call: "[E, 2I/128, H/128] float32, here [8, 12, 16]"
  std::string expect = std::string(layout) + ", here [";
  for (int64_t want : dims) expect += (expect.back() == '[' ? "" : ", ") + std::to_string(want);
  expect += "]";
  if (!s.present()) return c.Fail(std::string(name) + " is required for this quant scheme; expected " + expect);
  HPC_RETURN_IF_ERROR(c.Dtype(name, s, {DType::kF32}));
  if (s.rank != static_cast<int>(dims.size())) {
    return c.Fail(std::string(name) + " must be " + expect + "; got shape " + ShapeString(s));
  }
  int d = 0;
  for (int64_t want : dims) {
    if (s.shape[d] != want) return c.Fail(std::string(name) + " must be " + expect + "; got shape " + ShapeString(s));
    ++d;
  }
  HPC_RETURN_IF_ERROR(c.Contiguous(name, s));
  return c.SameDevice(name, s, "x", ref);
}

Status Absent(const ArgCheck& c, const char* name, const TensorView& t, const char* scheme) {
  if (!t.present()) return Status::Ok();
  return c.Fail(std::string(name) + " is not used with quant=" + scheme + "; pass None");
}

const char* EnvText(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The A/B knobs that take one of a few words: the parser and the refusal read the same list.
constexpr const char* kPathWords[] = {"v1", "grouped", "stream", "auto"};
constexpr const char* kReduceWords[] = {"dense", "sparse"};
constexpr const char* kTiledMWords[] = {"16", "32"};
constexpr const char* kGemmTileWords[] = {"128x256", "128x128", "64x256", "64x128"};
constexpr const char* kActWords[] = {"kernel", "epilogue"};
constexpr const char* kGatherWords[] = {"rows", "tokens"};
constexpr const char* kClusterWords[] = {"1", "n2", "m2"};
constexpr const char* kNarrowClusterWords[] = {"1", "n2"};

// 1 + the index of the variable's value in `words`, 0 when it is unset or empty, -1 for anything else.
template <size_t N>
int EnvWord(const char* name, const char* const (&words)[N]) {
  const char* v = EnvText(name);
  if (*v == '\0') return 0;
  for (size_t i = 0; i < N; ++i) {
    if (std::strcmp(v, words[i]) == 0) return static_cast<int>(i) + 1;
  }
  return -1;
}

// "NAME must be 'a', 'b' or unset; got '...'"
template <size_t N>
std::string EnvWordRefusal(const char* name, const char* const (&words)[N]) {
  std::string s = std::string(name) + " must be ";
  for (size_t i = 0; i < N; ++i) s += (i > 0 ? ", '" : "'") + std::string(words[i]) + "'";
  return s + " or unset; got '" + EnvText(name) + "'";
}

// An A/B knob's value: `unset` when the variable is unset or empty, values[i] for the i-th word, `invalid` else
// (the validation reports it with EnvWordRefusal).
template <class E, size_t N>
E EnvChoice(const char* name, const char* const (&words)[N], E unset, const E (&values)[N], E invalid) {
  const int w = EnvWord(name, words);
  return w == 0 ? unset : (w < 0 ? invalid : values[w - 1]);
}

}  // namespace

namespace moe {

MoePathChoice MoePathFromEnv() {
  static const MoePathChoice choice = [] {
    switch (EnvWord("HPC_XLA_MOE_PATH", kPathWords)) {
      case 1: return MoePathChoice::kV1;
      case 2: return MoePathChoice::kGrouped;
      case 3: return MoePathChoice::kStream;
      case -1: return MoePathChoice::kInvalid;
      default: return MoePathChoice::kAuto;  // unset or "auto"
    }
  }();
  return choice;
}

int MoeAlignCtasFromEnv() {
  static const int ctas = EnvInt("HPC_XLA_MOE_ALIGN_CTAS", 0);
  return ctas;
}

// HPC_XLA_MOE_UP_SPLITS: 0 when unset, else the value (ValidateFusedMoeCuda rejects anything outside 1-8).
int MoeUpSplitsFromEnv() {
  static const int splits = EnvInt("HPC_XLA_MOE_UP_SPLITS", 0);
  return splits >= 1 && splits <= kMaxUpSplits ? splits : 0;
}

int MoeTiledMFromEnv() {
  static const int m = [] {
    const int w = EnvWord("HPC_XLA_MOE_TILED_M", kTiledMWords);
    return w > 0 ? 16 * w : w;  // "16" -> 16, "32" -> 32
  }();
  return m;
}

int MoeReduceFormFromEnv() {
  static const int form = EnvWord("HPC_XLA_MOE_REDUCE", kReduceWords);  // 1 dense, 2 sparse
  return form;
}

GroupedGemmTile GroupedGemmTileFromEnv() {
  static const GroupedGemmTile tile = [] {
    static constexpr int kShapes[][2] = {{128, 256}, {128, 128}, {64, 256}, {64, 128}};  // kGemmTileWords' order
    static_assert(sizeof(kShapes) / sizeof(kShapes[0]) == sizeof(kGemmTileWords) / sizeof(kGemmTileWords[0]));
    const int w = EnvWord("HPC_XLA_MOE_GEMM_TILE", kGemmTileWords);
    GroupedGemmTile t;
    if (w > 0) t.m = kShapes[w - 1][0], t.n = kShapes[w - 1][1];
    t.valid = w >= 0;
    return t;
  }();
  return tile;
}

GroupedAct GroupedActFromEnv() {
  using A = GroupedAct;
  static const A act = EnvChoice("HPC_XLA_MOE_ACT", kActWords, A::kEpilogue, {A::kKernel, A::kEpilogue}, A::kInvalid);
  return act;
}

GroupedCluster GroupedClusterFromEnv() {
  using C = GroupedCluster;
  static const C cluster = EnvChoice("HPC_XLA_MOE_GEMM_CLUSTER", kClusterWords, C::kN2, {C::kOne, C::kN2, C::kM2},
                                   C::kInvalid);
  return cluster;
}

GroupedCluster NarrowClusterFromEnv() {
  using C = GroupedCluster;
  static const C cluster =
      EnvChoice("HPC_XLA_MOE_NARROW_CLUSTER", kNarrowClusterWords, C::kN2, {C::kOne, C::kN2}, C::kInvalid);
  return cluster;
}

GroupedGather GroupedGatherFromEnv() {
  using G = GroupedGather;
  static const G gather =
      EnvChoice("HPC_XLA_MOE_GATHER", kGatherWords, G::kTokens, {G::kRows, G::kTokens}, G::kInvalid);
  return gather;
}

}  // namespace moe

namespace {

// The shape rules of fused_moe that need no tensors: shared by the op's validation and by the workspace-size
// functions (which answered sizes for shapes the op refuses).
Status CheckMoeShapes(const ArgCheck& c, int64_t hidden, int64_t inter, MoeQuant quant, bool w13_interleaved) {
  if (hidden % 16 != 0 || inter % 16 != 0 || hidden <= 0 || inter <= 0) {
    return c.Fail("H and I must be positive multiples of 16; got H=" + std::to_string(hidden) + ", I=" +
                  std::to_string(inter));
  }
  if (w13_interleaved) {
    if (quant == MoeQuant::kFp8Block128) {
      return c.Fail("w13_interleaved needs quant None or fp8_tensor (fp8_block128's 128-row weight scales would span "
                    "gate and up rows); got fp8_block128");
    }
    if (inter % kW13InterleaveRows != 0) {
      return c.Fail("w13_interleaved needs I (w13.shape[1] / 2) to be a multiple of 64; got " + std::to_string(inter));
    }
  }
  return Status::Ok();
}

// fp8_block128's scales cover 128 x 128 weight blocks (the op checks its weights' dtype first).
Status CheckBlock128Shapes(const ArgCheck& c, int64_t hidden, int64_t inter) {
  if (hidden % kMoeBlock != 0 || inter % kMoeBlock != 0) {
    return c.Fail("quant='fp8_block128' needs H and I to be multiples of 128; got H=" + std::to_string(hidden) +
                  ", I=" + std::to_string(inter));
  }
  return Status::Ok();
}

// T * top_k (token, slot) pairs are indexed by int32 (the sorted rows' pair indices).
Status CheckMoePairs(const ArgCheck& c, int64_t tokens, int64_t top_k) {
  if (tokens > INT32_MAX / top_k) {
    return c.Fail("T * top_k (" + std::to_string(tokens) + " * " + std::to_string(top_k) +
                  ") must be < 2^31: the pairs are indexed by int32");
  }
  return Status::Ok();
}

// What the CUDA pipeline needs on top of the op's rules (ValidateFusedMoeCuda; the workspace sizes, which are the
// CUDA path's). H and I <= 2^24 keep the workspace arithmetic far inside int64 (T * top_k <= 2^30 rows of up to
// 8 x 2I floats); no model comes near.
Status CheckMoeCudaShapes(const ArgCheck& c, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                          int64_t inter) {
  if (hidden % 64 != 0) return c.Fail("the CUDA path needs H (x.shape[1]) to be a multiple of 64; got " + std::to_string(hidden));
  if (inter % 64 != 0) {
    return c.Fail("the CUDA path needs I (w13.shape[1] / 2) to be a multiple of 64; got " + std::to_string(inter));
  }
  if (hidden > (int64_t{1} << 24) || inter > (int64_t{1} << 24)) {
    return c.Fail("the CUDA path supports H and I up to 2^24; got H=" + std::to_string(hidden) + ", I=" +
                  std::to_string(inter));
  }
  if (experts > kMaxMoeCudaExperts) {
    return c.Fail("the CUDA path supports at most " + std::to_string(kMaxMoeCudaExperts) +
                  " local experts (w13.shape[0]); got " + std::to_string(experts));
  }
  if (tokens * top_k > (int64_t{1} << 30)) {
    return c.Fail("T * top_k must be <= 2^30 on the CUDA path; got " + std::to_string(tokens * top_k));
  }
  return Status::Ok();
}

// Fused routing (FusedMoeArgs::route): moe_route's rules in fused_moe's name, its outputs the op's topk views, and
// those written views kept apart from everything the op reads or writes.
Status ValidateFusedRouting(const ArgCheck& c, const FusedMoeArgs& a) {
  const MoeRouteArgs& r = a.route;
  if (r.topk_weights.data != a.topk_weights.data || r.topk_ids.data != a.topk_ids.data ||
      r.top_k != (a.topk_ids.rank == 2 ? a.topk_ids.shape[1] : -1)) {
    return Status::Internal("fused_moe: the fused routing's outputs must be the op's topk_weights / topk_ids");
  }
  // its rows against x's first: the routing's own checks would blame the outputs sized from x
  HPC_RETURN_IF_ERROR(c.Required("router_logits", r.router_logits, 2, "[T, E]"));
  HPC_RETURN_IF_ERROR(c.SameDevice("router_logits", r.router_logits, "x", a.x));
  HPC_RETURN_IF_ERROR(c.Dim("router_logits", r.router_logits, 0, a.x.shape[0], "T, from x"));
  HPC_RETURN_IF_ERROR(ValidateMoeRoute(r, "fused_moe"));
  if (r.router_logits.shape[1] != GlobalExperts(a)) {
    return c.Fail("router_logits scores " + std::to_string(r.router_logits.shape[1]) +
                  " experts (shape[1]); the routing has num_experts_global (or E + expert_offset) = " +
                  std::to_string(GlobalExperts(a)));
  }
  if (a.traced_offset.present()) return c.Fail("fused routing takes a static expert_offset (no traced_offset)");
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"topk_weights", &a.topk_weights},
                                {"topk_ids", &a.topk_ids}}) {
    for (const auto& [other, o] : {std::pair<const char*, const TensorView*>{"x", &a.x}, {"x_scale", &a.x_scale},
                                   {"w13", &a.w13}, {"w2", &a.w2}, {"out", &a.out}, {"workspace", &a.workspace},
                                   {"shared_output", &a.shared_output}, {"correction_bias", &r.correction_bias}}) {
      if (o->present()) HPC_RETURN_IF_ERROR(c.Disjoint(name, *t, other, *o));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateFusedMoe(const FusedMoeArgs& a) {
  ArgCheck c("fused_moe");
  HPC_RETURN_IF_ERROR(c.Required("x", a.x, 2, "[T, H]"));
  HPC_RETURN_IF_ERROR(c.Dtype("x", a.x, {DType::kBF16, DType::kF8E4M3}));
  HPC_RETURN_IF_ERROR(c.Contiguous("x", a.x));
  const int64_t tokens = a.x.shape[0], hidden = a.x.shape[1];
  HPC_RETURN_IF_ERROR(c.Required("w13", a.w13, 3, "[E, 2I, H]"));
  HPC_RETURN_IF_ERROR(c.Dtype("w13", a.w13, {DType::kBF16, DType::kF8E4M3}));
  HPC_RETURN_IF_ERROR(c.Contiguous("w13", a.w13));
  HPC_RETURN_IF_ERROR(c.SameDevice("w13", a.w13, "x", a.x));
  const int64_t experts = a.w13.shape[0], inter2 = a.w13.shape[1];
  HPC_RETURN_IF_ERROR(c.Dim("w13", a.w13, 2, hidden, "H, from x"));
  if (inter2 % 2 != 0 || inter2 == 0) return c.Fail("w13.shape[1] (2I) must be even and > 0; got " + std::to_string(inter2));
  const int64_t inter = inter2 / 2;
  HPC_RETURN_IF_ERROR(c.Required("w2", a.w2, 3, "[E, H, I]"));
  HPC_RETURN_IF_ERROR(c.SameDtype("w2", a.w2, "w13", a.w13));
  HPC_RETURN_IF_ERROR(c.Dim("w2", a.w2, 0, experts, "E, from w13"));
  HPC_RETURN_IF_ERROR(c.Dim("w2", a.w2, 1, hidden, "H, from x"));
  HPC_RETURN_IF_ERROR(c.Dim("w2", a.w2, 2, inter, "I, from w13"));
  HPC_RETURN_IF_ERROR(c.Contiguous("w2", a.w2));
  HPC_RETURN_IF_ERROR(c.SameDevice("w2", a.w2, "x", a.x));
  HPC_RETURN_IF_ERROR(CheckMoeShapes(c, hidden, inter, a.quant, a.w13_interleaved));

  const bool fp8_weights = a.w13.dtype == DType::kF8E4M3;
  switch (a.quant) {
    case MoeQuant::kNone:
      if (fp8_weights || a.x.dtype != DType::kBF16) {
        return c.Fail("quant=None needs bfloat16 x, w13 and w2; got x " + std::string(DTypeName(a.x.dtype)) +
                      ", w13 " + DTypeName(a.w13.dtype));
      }
      for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"x_scale", &a.x_scale},
                                    {"w13_scale", &a.w13_scale}, {"w2_scale", &a.w2_scale},
                                    {"a13_scale", &a.a13_scale}, {"a2_scale", &a.a2_scale}}) {
        HPC_RETURN_IF_ERROR(Absent(c, name, *t, "None"));
      }
      break;
    case MoeQuant::kFp8Tensor:
      if (!fp8_weights) return c.Fail("quant='fp8_tensor' needs float8_e4m3fn w13 and w2");
      HPC_RETURN_IF_ERROR(ValidateScale(c, "w13_scale", a.w13_scale, {experts}, "[E] float32", a.x));
      HPC_RETURN_IF_ERROR(ValidateScale(c, "w2_scale", a.w2_scale, {experts}, "[E] float32", a.x));
      for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"a13_scale", &a.a13_scale},
                                    {"a2_scale", &a.a2_scale}}) {
        if (!t->present()) return c.Fail(std::string(name) + " (static activation scale) is required with quant='fp8_tensor'");
        HPC_RETURN_IF_ERROR(c.Scalar(name, *t));
      }
      HPC_RETURN_IF_ERROR(Absent(c, "x_scale", a.x_scale, "fp8_tensor (a13_scale is x's scale)"));
      break;
    case MoeQuant::kFp8Block128:
      if (!fp8_weights) return c.Fail("quant='fp8_block128' needs float8_e4m3fn w13 and w2");
      HPC_RETURN_IF_ERROR(CheckBlock128Shapes(c, hidden, inter));
      HPC_RETURN_IF_ERROR(ValidateScale(c, "w13_scale", a.w13_scale, {experts, inter2 / kMoeBlock, hidden / kMoeBlock},
                                        "[E, 2I/128, H/128] float32", a.x));
      HPC_RETURN_IF_ERROR(ValidateScale(c, "w2_scale", a.w2_scale, {experts, hidden / kMoeBlock, inter / kMoeBlock},
                                        "[E, H/128, I/128] float32", a.x));
      HPC_RETURN_IF_ERROR(Absent(c, "a13_scale", a.a13_scale, "fp8_block128 (activations are quantized per token)"));
      HPC_RETURN_IF_ERROR(Absent(c, "a2_scale", a.a2_scale, "fp8_block128 (activations are quantized per token)"));
      if (a.x.dtype == DType::kF8E4M3) {
        HPC_RETURN_IF_ERROR(ValidateScale(c, "x_scale", a.x_scale, {tokens, hidden / kMoeBlock}, "[T, H/128] float32",
                                          a.x));
      } else {
        HPC_RETURN_IF_ERROR(Absent(c, "x_scale", a.x_scale, "fp8_block128 with bfloat16 x"));
      }
      break;
    default:
      return c.Fail("quant must be None, 'fp8_tensor' or 'fp8_block128'");
  }
  if (a.activation != MoeActivation::kSilu) return c.Fail("activation must be 'silu'");

  if (Routed(a)) HPC_RETURN_IF_ERROR(ValidateFusedRouting(c, a));
  HPC_RETURN_IF_ERROR(c.Dense("topk_ids", a.topk_ids, "[T, top_k]", {DType::kI32}, {{tokens, "T, from x"}, {-1, ""}},
                              "x", a.x));
  HPC_RETURN_IF_ERROR(c.Dense("topk_weights", a.topk_weights, "[T, top_k]", {DType::kF32},
                              {{tokens, "T, from x"}, {a.topk_ids.shape[1], "top_k, from topk_ids"}}, "x", a.x));
  if (a.topk_ids.shape[1] < 1) return c.Fail("top_k must be >= 1");
  HPC_RETURN_IF_ERROR(CheckMoePairs(c, tokens, a.topk_ids.shape[1]));
  if (a.expert_offset < 0 || a.expert_offset > INT32_MAX) {  // ids are int32
    return c.Fail("expert_offset must be in [0, 2^31); got " + std::to_string(a.expert_offset));
  }
  if (a.num_experts_global < 0 || a.num_experts_global > INT32_MAX) {
    return c.Fail("num_experts_global must be in [1, 2^31) (or 0: E + expert_offset); got " +
                  std::to_string(a.num_experts_global));
  }
  const int64_t global = GlobalExperts(a);
  if (a.expert_offset + experts > global) {
    return c.Fail("expert_offset + E (" + std::to_string(a.expert_offset + experts) + ") exceeds num_experts_global (" +
                  std::to_string(global) + ")");
  }
  if (a.topk_ids.shape[1] > global) {  // a token's top_k experts are distinct experts of the routing
    return c.Fail("top_k (topk_ids.shape[1] = " + std::to_string(a.topk_ids.shape[1]) +
                  ") exceeds the routing's experts (num_experts_global, or E + expert_offset when not given: " +
                  std::to_string(global) + ")");
  }
  if (a.traced_offset.present()) {
    HPC_RETURN_IF_ERROR(c.Dtype("traced_offset", a.traced_offset, {DType::kI32}));
    if (a.traced_offset.numel() != 1 || a.expert_offset != 0) {
      return c.Fail("traced_offset must be one int32 with expert_offset 0 (hpc_xla.jax folds it into topk_ids)");
    }
  }
  if (a.shared_output.present()) {
    HPC_RETURN_IF_ERROR(c.Dense("shared_output", a.shared_output, "[T, H]", {DType::kBF16},
                                {{tokens, "T, from x"}, {hidden, "H, from x"}}, "x", a.x));
  }
  HPC_RETURN_IF_ERROR(c.Dense("out", a.out, "[T, H]", {DType::kBF16}, {{tokens, "T, from x"}, {hidden, "H, from x"}},
                              "x", a.x));
  return Status::Ok();
}

Status CheckTracedOffset(const FusedMoeArgs& a, int64_t value) {
  const int64_t experts = a.w13.shape[0], global = GlobalExperts(a);
  if (value < 0 || value + experts > global) {
    return ArgCheck("fused_moe").Fail(
        "expert_offset (traced) = " + std::to_string(value) + " must be in [0, num_experts_global - E] = [0, " +
        std::to_string(global - experts) + "]: this rank holds experts [expert_offset, expert_offset + E) with E = " +
        std::to_string(experts) + " (w13.shape[0]) -- under shard_map, axis_index * E");
  }
  return Status::Ok();
}

int FusedMoeTileM(int64_t tokens, int64_t top_k, int64_t experts, MoeQuant quant) {
  return moe::TileM(tokens, top_k, experts, quant);
}

bool FusedMoeActInEpilogue(int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, MoeQuant quant,
                           bool w13_interleaved) {
  return moe::TileM(tokens, top_k, experts, quant) == moe::kGroupedTileM &&
         moe::GroupedGemmActInEpilogue(quant, moe::GroupedCtaRows(tokens * top_k, experts, experts_global, quant),
                                       w13_interleaved);
}

int FusedMoeGroupedCtaRows(int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, MoeQuant quant) {
  return moe::GroupedCtaRows(tokens * top_k, experts, experts_global, quant);
}

// The one pairing of the workspace layout with the activation's place (FusedMoeWorkspaceBytes, FusedMoePlanOf).
static moe::MoePlan PlanWithAct(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                                MoeQuant quant, int64_t experts_global, bool w13_interleaved) {
  return moe::MakeMoePlan(tokens, top_k, experts, hidden, inter, quant,
                          FusedMoeActInEpilogue(tokens, top_k, experts, experts_global, quant, w13_interleaved));
}

Status ValidateMoeWorkspaceShapes(const char* op, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                  int64_t inter, MoeQuant quant, int64_t experts_global, bool w13_interleaved) {
  ArgCheck c(op);
  if (tokens < 0) return c.Fail("tokens must be >= 0; got " + std::to_string(tokens));
  if (top_k < 1) return c.Fail("top_k must be >= 1; got " + std::to_string(top_k));
  if (experts < 1) return c.Fail("num_experts must be >= 1; got " + std::to_string(experts));  // (<= 1024: CUDA's)
  if (quant != MoeQuant::kNone && quant != MoeQuant::kFp8Tensor && quant != MoeQuant::kFp8Block128) {
    return c.Fail("quant must be None, 'fp8_tensor' or 'fp8_block128'");
  }
  HPC_RETURN_IF_ERROR(CheckMoeShapes(c, hidden, inter, quant, w13_interleaved));
  if (quant == MoeQuant::kFp8Block128) HPC_RETURN_IF_ERROR(CheckBlock128Shapes(c, hidden, inter));
  if (experts_global != 0 && (experts_global < experts || experts_global > INT32_MAX)) {
    return c.Fail("num_experts_global must be in [num_experts, 2^31) = [" + std::to_string(experts) +
                  ", 2^31) (the local experts are part of the routing's), or not given; got " +
                  std::to_string(experts_global));
  }
  // (not given: the routing's count is E + expert_offset, and the offset is the call's: no top_k bound here)
  if (experts_global != 0 && top_k > experts_global) {
    return c.Fail("top_k (" + std::to_string(top_k) + ") exceeds the routing's experts (num_experts_global = " +
                  std::to_string(experts_global) + ")");
  }
  HPC_RETURN_IF_ERROR(CheckMoePairs(c, tokens, top_k));
  return CheckMoeCudaShapes(c, tokens, top_k, experts, hidden, inter);
}

int64_t FusedMoeWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                               MoeQuant quant, int64_t experts_global, bool w13_interleaved) {
  return PlanWithAct(tokens, top_k, experts, hidden, inter, quant, experts_global, w13_interleaved).total;
}

int64_t FusedMoeMaxWorkspaceBytes(int64_t max_tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                                  MoeQuant quant, int64_t experts_global, bool w13_interleaved) {
  return moe::MaxMoeWorkspaceBytes(max_tokens, top_k, experts, hidden, inter, quant, [&](int64_t t) {
    return FusedMoeActInEpilogue(t, top_k, experts, experts_global, quant, w13_interleaved);
  });
}

moe::MoePlan FusedMoePlanOf(const FusedMoeArgs& a) {
  // a.num_experts_global as given (0: unknown), as the grouped launcher picks its CTA tile from it
  return PlanWithAct(a.x.shape[0], a.topk_ids.shape[1], a.w13.shape[0], a.x.shape[1], a.w13.shape[1] / 2, a.quant,
                     a.num_experts_global, a.w13_interleaved);
}

Status ValidateFusedMoeCuda(const FusedMoeArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateFusedMoe(a));
  ArgCheck c("fused_moe");
  if (moe::MoePathFromEnv() == moe::MoePathChoice::kInvalid) {
    return c.Fail(EnvWordRefusal("HPC_XLA_MOE_PATH", kPathWords));
  }
  if (const char* v = std::getenv("HPC_XLA_MOE_UP_SPLITS"); v != nullptr && *v != '\0' && moe::MoeUpSplitsFromEnv() == 0) {
    return c.Fail("HPC_XLA_MOE_UP_SPLITS must be an integer in [1, " + std::to_string(moe::kMaxUpSplits) +
                  "] or unset; got '" + v + "'");
  }
  if (moe::MoeReduceFormFromEnv() < 0) return c.Fail(EnvWordRefusal("HPC_XLA_MOE_REDUCE", kReduceWords));
  if (moe::MoeTiledMFromEnv() < 0) return c.Fail(EnvWordRefusal("HPC_XLA_MOE_TILED_M", kTiledMWords));
  if (!moe::GroupedGemmTileFromEnv().valid) return c.Fail(EnvWordRefusal("HPC_XLA_MOE_GEMM_TILE", kGemmTileWords));
  if (moe::GroupedActFromEnv() == moe::GroupedAct::kInvalid) return c.Fail(EnvWordRefusal("HPC_XLA_MOE_ACT", kActWords));
  if (moe::GroupedGatherFromEnv() == moe::GroupedGather::kInvalid) {
    return c.Fail(EnvWordRefusal("HPC_XLA_MOE_GATHER", kGatherWords));
  }
  if (moe::GroupedClusterFromEnv() == moe::GroupedCluster::kInvalid) {
    return c.Fail(EnvWordRefusal("HPC_XLA_MOE_GEMM_CLUSTER", kClusterWords));
  }
  if (moe::NarrowClusterFromEnv() == moe::GroupedCluster::kInvalid) {
    return c.Fail(EnvWordRefusal("HPC_XLA_MOE_NARROW_CLUSTER", kNarrowClusterWords));
  }
  HPC_RETURN_IF_ERROR(CheckMoeCudaShapes(c, a.x.shape[0], a.topk_ids.shape[1], a.w13.shape[0], a.x.shape[1],
                                         a.w13.shape[1] / 2));
  // cp.async / vector loads move 16 bytes: the operands' base addresses must be 16-byte aligned.
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"x", &a.x}, {"w13", &a.w13}, {"w2", &a.w2},
                                {"shared_output", &a.shared_output}, {"out", &a.out}}) {
    if (t->present() && reinterpret_cast<uintptr_t>(t->data) % 16 != 0) {
      return c.Fail(std::string(name) + " must be 16-byte aligned on the CUDA path (a sliced view? pass a copy)");
    }
  }
  const int64_t need = FusedMoePlanOf(a).total;
  HPC_RETURN_IF_ERROR(c.Required("workspace", a.workspace, 1, "[fused_moe_workspace_size] uint8"));
  HPC_RETURN_IF_ERROR(c.Dtype("workspace", a.workspace, {DType::kU8}));
  HPC_RETURN_IF_ERROR(c.Contiguous("workspace", a.workspace));
  HPC_RETURN_IF_ERROR(c.SameDevice("workspace", a.workspace, "x", a.x));
  if (a.workspace.shape[0] < need) {
    return c.Fail("workspace must hold " + std::to_string(need) + " bytes (fused_moe_workspace_size); got " +
                  std::to_string(a.workspace.shape[0]));
  }
  if (reinterpret_cast<uintptr_t>(a.workspace.data) % 256 != 0) return c.Fail("workspace must be 256-byte aligned");
  return Status::Ok();
}

}  // namespace hpc
