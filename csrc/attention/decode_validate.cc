#include <cmath>
#include <cstdint>
#include <string>

#include "csrc/attention/decode.h"
#include "csrc/attention/decode_plan.h"
#include "csrc/common/arch.h"
#include "csrc/common/check.h"

namespace hpc {
namespace {

bool Fp8(DType d) { return d == DType::kF8E4M3; }

// Where a config's head counts come from, for ValidateConfig's messages. decode_plan's are its own arguments
// (nullptr: no origin); decode_attention reads them from its operands, and its messages name those as its Python
// faces' do when they plan (hpc_xla/_decode.py, planning_for_attention), so a k_cache of the wrong head count reads
// the same whichever side catches it.
struct HeadsFrom {
  const char* num_q_heads;
  const char* num_kv_heads;
};
constexpr HeadsFrom kAttentionHeads{"q.shape[1]", "k_cache.shape[2]"};

// " (num_q_heads = q.shape[1], num_kv_heads = k_cache.shape[2])", of the counts a message names; "" without `from`.
std::string Origin(const HeadsFrom* from, bool q_heads, bool kv_heads) {
  if (from == nullptr) return "";
  const std::string q = q_heads ? std::string("num_q_heads = ") + from->num_q_heads : "";
  const std::string kv = kv_heads ? std::string("num_kv_heads = ") + from->num_kv_heads : "";
  return " (" + q + (q_heads && kv_heads ? ", " : "") + kv + ")";
}

Status ValidateConfig(const ArgCheck& c, const DecodeConfig& cfg, const HeadsFrom* heads_from) {
  if (cfg.num_kv_heads < 1) {
    return c.Fail("num_kv_heads must be >= 1; got " + std::to_string(cfg.num_kv_heads) +
                  Origin(heads_from, false, true));
  }
  if (cfg.num_q_heads < cfg.num_kv_heads || cfg.num_q_heads % cfg.num_kv_heads != 0) {
    return c.Fail("num_q_heads (" + std::to_string(cfg.num_q_heads) + ") must be a multiple of num_kv_heads (" +
                  std::to_string(cfg.num_kv_heads) + ")" + Origin(heads_from, true, true));
  }
  const int group = cfg.num_q_heads / cfg.num_kv_heads;
  if (group > kMaxGroup) {
    return c.Fail("num_q_heads / num_kv_heads must be <= " + std::to_string(kMaxGroup) + "; got " +
                  std::to_string(group) + Origin(heads_from, true, true));
  }
  if (cfg.head_dim != 64 && cfg.head_dim != 128 && cfg.head_dim != 256) {
    return c.Fail("head_dim must be 64, 128 or 256; got " + std::to_string(cfg.head_dim));
  }
  if (cfg.q_len < 1 || cfg.q_len > kMaxQLen) {
    return c.Fail("q_len must be in [1, " + std::to_string(kMaxQLen) + "]; got " + std::to_string(cfg.q_len));
  }
  if (cfg.page_size != 16 && cfg.page_size != 32 && cfg.page_size != 64) {
    return c.Fail("page_size must be 16, 32 or 64; got " + std::to_string(cfg.page_size));
  }
  return Status::Ok();
}

}  // namespace

int StaticSplits(int64_t batch, int num_kv_heads, int max_ctas) {
  const int64_t units = batch * num_kv_heads;
  int64_t splits = units > 0 ? max_ctas / units : 1;
  if (splits < 1) splits = 1;
  if (splits > kMaxStaticSplits) splits = kMaxStaticSplits;
  return static_cast<int>(splits);
}

int64_t DecodeWorkspaceFloats(int64_t batch, int num_kv_heads, int num_q_heads, int head_dim, int q_len,
                              int max_ctas) {
  const int64_t rows = static_cast<int64_t>(q_len) * (num_q_heads / (num_kv_heads > 0 ? num_kv_heads : 1));
  const int64_t dynamic_slots = 2 * static_cast<int64_t>(max_ctas);
  const int64_t static_slots = batch * num_kv_heads * StaticSplits(batch, num_kv_heads, max_ctas);
  const int64_t slots = dynamic_slots > static_slots ? dynamic_slots : static_slots;
  return slots * rows * (head_dim + 1);  // O rows + one log-sum-exp per row
}

Status ValidateDecodePlan(const DecodePlanArgs& a) {
  ArgCheck c("decode_plan");
  HPC_RETURN_IF_ERROR(ValidateConfig(c, a.config, /*heads_from=*/nullptr));
  // (a plan for an int32 "cache" was accepted and failed only at the call, as a plan/call mismatch; the call's own
  // cache dtype check names k_cache)
  const DType kv = a.config.kv_dtype;
  if (kv != DType::kBF16 && kv != DType::kF16 && kv != DType::kF8E4M3) {
    return c.Fail(std::string("kv_dtype must be bfloat16, float16 or float8_e4m3fn; got ") + DTypeName(kv));
  }
  HPC_RETURN_IF_ERROR(c.Required("seq_lens", a.seq_lens, 1, "[B]"));
  HPC_RETURN_IF_ERROR(c.Dtype("seq_lens", a.seq_lens, {DType::kI32}));
  HPC_RETURN_IF_ERROR(c.Contiguous("seq_lens", a.seq_lens));
  if (a.seq_lens.shape[0] < 1) return c.Fail("seq_lens must hold at least one sequence");
  if (a.max_ctas < 1 || a.max_ctas > attention::kMaxCtas) {
    return c.Fail("max_ctas must be in [1, " + std::to_string(attention::kMaxCtas) + "]; got " +
                  std::to_string(a.max_ctas));
  }
  HPC_RETURN_IF_ERROR(c.Required("plan", a.plan, 1, "[plan_size]"));
  HPC_RETURN_IF_ERROR(c.Dtype("plan", a.plan, {DType::kI32}));
  HPC_RETURN_IF_ERROR(c.Contiguous("plan", a.plan));
  HPC_RETURN_IF_ERROR(c.SameDevice("plan", a.plan, "seq_lens", a.seq_lens));
  const int64_t need = attention::PlanInts(a.seq_lens.shape[0], a.max_ctas);
  // exactly: decode_attention reads max_ctas back from the plan's size, so a longer buffer would claim more CTAs
  if (a.plan.shape[0] != need) {
    return c.Fail("plan must hold exactly " + std::to_string(need) + " int32 for batch " +
                  std::to_string(a.seq_lens.shape[0]) + " and max_ctas " + std::to_string(a.max_ctas) + "; got " +
                  std::to_string(a.plan.shape[0]));
  }
  return Status::Ok();
}

Status ValidateDecodeAttention(const DecodeAttentionArgs& a, DecodeConfig* cfg) {
  ArgCheck c("decode_attention");
  HPC_RETURN_IF_ERROR(c.Required("q", a.q, 3, "[B * q_len, Hq, D]"));
  HPC_RETURN_IF_ERROR(c.Dtype("q", a.q, {DType::kBF16, DType::kF16, DType::kF8E4M3}));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("q", a.q));
  // k_cache against q (head_dim, the head counts) before v_cache against k_cache (check.h, PagedKCache)
  HPC_RETURN_IF_ERROR(c.PagedKCache(a.k_cache, {DType::kBF16, DType::kF16, DType::kF8E4M3}, "q", a.q));
  if (!Fp8(a.q.dtype) && !Fp8(a.k_cache.dtype) && a.q.dtype != a.k_cache.dtype) {
    return c.Fail(std::string("q (") + DTypeName(a.q.dtype) + ") and k_cache (" + DTypeName(a.k_cache.dtype) +
                  ") must have the same dtype unless one of them is float8_e4m3fn");
  }

  cfg->num_q_heads = static_cast<int>(a.q.shape[1]);
  cfg->head_dim = static_cast<int>(a.q.shape[2]);
  cfg->num_kv_heads = static_cast<int>(a.k_cache.shape[2]);
  cfg->page_size = static_cast<int>(a.k_cache.shape[1]);
  cfg->q_len = a.q_len;
  cfg->kv_dtype = a.k_cache.dtype;
  cfg->q_dtype = a.q.dtype;
  HPC_RETURN_IF_ERROR(c.Dim("k_cache", a.k_cache, 3, cfg->head_dim, "head_dim, from q"));
  HPC_RETURN_IF_ERROR(ValidateConfig(c, *cfg, &kAttentionHeads));
  HPC_RETURN_IF_ERROR(c.PagedVCacheLikeK(a.v_cache, a.k_cache, "q", a.q));

  HPC_RETURN_IF_ERROR(c.Required("seq_lens", a.seq_lens, 1, "[B]"));
  HPC_RETURN_IF_ERROR(c.Dtype("seq_lens", a.seq_lens, {DType::kI32}));
  HPC_RETURN_IF_ERROR(c.Contiguous("seq_lens", a.seq_lens));
  HPC_RETURN_IF_ERROR(c.SameDevice("seq_lens", a.seq_lens, "q", a.q));
  const int64_t batch = a.seq_lens.shape[0];
  if (batch < 1) return c.Fail("seq_lens must hold at least one sequence");
  if (a.q.shape[0] != batch * a.q_len) {
    return c.Fail("q.shape[0] must be batch * q_len = " + std::to_string(batch) + " * " + std::to_string(a.q_len) +
                  " = " + std::to_string(batch * a.q_len) + " (batch from seq_lens); got " +
                  std::to_string(a.q.shape[0]));
  }
  HPC_RETURN_IF_ERROR(c.Required("block_table", a.block_table, 2, "[B, max_blocks]"));
  HPC_RETURN_IF_ERROR(c.Dtype("block_table", a.block_table, {DType::kI32}));
  HPC_RETURN_IF_ERROR(c.Dim("block_table", a.block_table, 0, batch, "batch, from seq_lens"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("block_table", a.block_table));
  HPC_RETURN_IF_ERROR(c.SameDevice("block_table", a.block_table, "q", a.q));

  if (Fp8(a.q.dtype)) {
    HPC_RETURN_IF_ERROR(c.Dense("q_scale", a.q_scale, "[B * q_len, Hq]", {DType::kF32},
                                {{a.q.shape[0], "rows, from q"}, {a.q.shape[1], "num_q_heads, from q"}}, "q", a.q));
  } else if (a.q_scale.present()) {
    return c.Fail("q_scale is only used with a float8_e4m3fn q; q is " + std::string(DTypeName(a.q.dtype)));
  }
  HPC_RETURN_IF_ERROR(c.CacheScale("k_scale", a.k_scale, "k_cache", a.k_cache));
  HPC_RETURN_IF_ERROR(c.CacheScale("v_scale", a.v_scale, "k_cache", a.k_cache));

  HPC_RETURN_IF_ERROR(c.Required("out", a.out, 3, "[B * q_len, Hq, D]"));
  // A 16-bit q's own dtype; an fp8 q (from rope_norm's q_quant) carries no model dtype, so either 16-bit one
  // (an fp16 model's attention output stays fp16).
  if (Fp8(a.q.dtype)) {
    HPC_RETURN_IF_ERROR(c.Dtype("out", a.out, {DType::kBF16, DType::kF16}));
  } else {
    HPC_RETURN_IF_ERROR(c.Dtype("out", a.out, {a.q.dtype}));
  }
  for (int d = 0; d < 3; ++d) HPC_RETURN_IF_ERROR(c.Dim("out", a.out, d, a.q.shape[d], "from q"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("out", a.out));
  HPC_RETURN_IF_ERROR(c.Writable("out", a.out));
  HPC_RETURN_IF_ERROR(c.SameDevice("out", a.out, "q", a.q));
  if (!(a.sm_scale > 0.0f) || !std::isfinite(a.sm_scale)) {
    return c.Fail("sm_scale must be finite and > 0; got " + std::to_string(a.sm_scale));
  }

  int max_ctas = a.max_ctas;
  if (a.schedule == DecodeSchedule::kDynamic) {
    HPC_RETURN_IF_ERROR(c.Required("plan", a.plan, 1, "[plan_size] (from decode_plan)"));
    HPC_RETURN_IF_ERROR(c.Dtype("plan", a.plan, {DType::kI32}));
    HPC_RETURN_IF_ERROR(c.Contiguous("plan", a.plan));
    HPC_RETURN_IF_ERROR(c.SameDevice("plan", a.plan, "q", a.q));
    // The plan's size gives max_ctas for this batch (the header, checked on the CPU path and with HPC_XLA_CHECK,
    // confirms both).
    const int64_t ctas = attention::PlanMaxCtas(a.plan.shape[0], batch);
    if (ctas < 1 || ctas > INT32_MAX) {
      return c.Fail("plan has " + std::to_string(a.plan.shape[0]) + " int32, which no decode_plan for batch " +
                    std::to_string(batch) + " produces (was it built for another batch size?)");
    }
    max_ctas = static_cast<int>(ctas);
  } else if (a.schedule != DecodeSchedule::kStatic) {
    return c.Fail("schedule must be 'dynamic' or 'static'");
  }
  if (max_ctas < 1 || max_ctas > attention::kMaxCtas) {
    return c.Fail("max_ctas must be in [1, " + std::to_string(attention::kMaxCtas) + "]; got " +
                  std::to_string(max_ctas) + (a.schedule == DecodeSchedule::kDynamic ? " (from the plan's size)" : ""));
  }
  HPC_RETURN_IF_ERROR(c.Required("workspace", a.workspace, 1, "[workspace_size] float32"));
  HPC_RETURN_IF_ERROR(c.Dtype("workspace", a.workspace, {DType::kF32}));
  HPC_RETURN_IF_ERROR(c.Contiguous("workspace", a.workspace));
  HPC_RETURN_IF_ERROR(c.SameDevice("workspace", a.workspace, "q", a.q));
  const int64_t need = DecodeWorkspaceFloats(batch, cfg->num_kv_heads, cfg->num_q_heads, cfg->head_dim, a.q_len,
                                             max_ctas);
  if (a.workspace.shape[0] < need) {
    return c.Fail("workspace must hold " + std::to_string(need) + " float32; got " +
                  std::to_string(a.workspace.shape[0]));
  }
  return Status::Ok();
}

// Header check shared by the CPU path (host plan) and the GPU debug mode (copied plan header).
Status CheckPlanHeader(const int32_t* header, const DecodeConfig& cfg, int64_t batch, int64_t plan_ints) {
  ArgCheck c("decode_attention");
  using namespace attention;
  if (header[kFieldMagic] != kPlanMagic || header[kFieldVersion] != kPlanVersion) {
    return c.Fail("plan is not a decode_plan output (bad magic/version)");
  }
  const struct {
    PlanField field;
    int64_t want;
    const char* name;
  } fields[] = {{kFieldBatch, batch, "batch"},
                {kFieldNumKvHeads, cfg.num_kv_heads, "num_kv_heads"},
                {kFieldNumQHeads, cfg.num_q_heads, "num_q_heads"},
                {kFieldHeadDim, cfg.head_dim, "head_dim"},
                {kFieldQLen, cfg.q_len, "q_len"},
                {kFieldPageSize, cfg.page_size, "page_size"},
                {kFieldKvDtype, static_cast<int64_t>(cfg.kv_dtype), "kv_dtype (code)"}};
  for (const auto& f : fields) {
    if (header[f.field] != f.want) {
      return c.Fail(std::string("plan was built for ") + f.name + "=" + std::to_string(header[f.field]) +
                    " but this call has " + f.name + "=" + std::to_string(f.want));
    }
  }
  if (header[kFieldNumCtas] < 0 || header[kFieldNumCtas] > header[kFieldMaxCtas] || header[kFieldCapacity] < 1 ||
      (header[kFieldAligned] != 0 && header[kFieldAligned] != 1)) {
    return c.Fail("plan header is inconsistent (num_ctas=" + std::to_string(header[kFieldNumCtas]) + ", max_ctas=" +
                  std::to_string(header[kFieldMaxCtas]) + ", capacity=" + std::to_string(header[kFieldCapacity]) +
                  ", aligned=" + std::to_string(header[kFieldAligned]) + "): not a decode_plan output");
  }
  // A plan buffer longer than its decode_plan wrote (e.g. sized for another batch) implies more CTAs than were
  // planned, and those would read start[] entries nobody wrote: the size and the header must agree.
  if (header[kFieldMaxCtas] != PlanMaxCtas(plan_ints, batch)) {
    return c.Fail("plan holds " + std::to_string(plan_ints) + " int32, which for batch " + std::to_string(batch) +
                  " means max_ctas=" + std::to_string(PlanMaxCtas(plan_ints, batch)) +
                  ", but decode_plan built it for max_ctas=" + std::to_string(header[kFieldMaxCtas]) +
                  " (pass the whole plan tensor decode_plan filled, not a resized buffer)");
  }
  return Status::Ok();
}

Status CheckPlanLengths(const int32_t* plan, const int32_t* seq_lens, int64_t batch) {
  using namespace attention;
  const int32_t* prefix = PlanPrefix(plan);
  const int piece_cost = plan[kFieldPieceCost];
  // An aligned plan fits every length with the same number of CTAs per unit: each CTA still gets a tile, so every
  // partial the combine merges is written.
  const bool aligned = plan[kFieldAligned] == 1;
  const int64_t q = plan[kFieldCapacity];
  for (int64_t b = 0; b < batch; ++b) {
    const int n = TilesOf(seq_lens[b]);
    const int64_t want = aligned ? AlignedSpan(n, q) : UnitCost(seq_lens[b], piece_cost);
    const int64_t have = static_cast<int64_t>(prefix[b + 1]) - prefix[b];
    if (want != have) {
      const std::string has = aligned ? std::to_string(have / q) + " CTAs of " + std::to_string(q) + " tiles"
                                      : std::to_string(have > piece_cost ? have - piece_cost : 0);
      return ArgCheck("decode_attention")
          .Fail("plan does not match seq_lens: seq_lens[" + std::to_string(b) + "] = " + std::to_string(seq_lens[b]) +
                " needs " + std::to_string(n) + " tiles, the plan has " + has +
                " -- refill it for these seq_lens (decode_plan(seq_lens, ..., out=plan)) before the call");
    }
  }
  return Status::Ok();
}

namespace {

// HPC_XLA_DECODE_PIECE_COST=0..16: one piece cost for every config and batch (A/B); -1 when not set
int ForcedPieceCost() {
  static const int forced = [] {
    const int n = EnvInt("HPC_XLA_DECODE_PIECE_COST", -1);
    return n >= 0 && n <= 16 ? n : -1;
  }();
  return forced;
}

int RowsPerPiece(const DecodeConfig& config) {
  return config.q_len * (config.num_kv_heads > 0 ? config.num_q_heads / config.num_kv_heads : 1);
}

}  // namespace

int DecodePieceCostTiles(const DecodeConfig& config) {
  return ForcedPieceCost() >= 0 ? ForcedPieceCost() : attention::PieceCostTiles(RowsPerPiece(config));
}

int DecodeAlternativePieceCostTiles(const DecodeConfig& config) {
  if (ForcedPieceCost() >= 0) return 0;
  const int alt = attention::AlternativePieceCostTiles(RowsPerPiece(config));
  // HPC_XLA_DECODE_ALIGNED=3 (A/B): the choosing planner for every config, so the aligned layout is forced below 16
  // rows too (both piece-cost layouts then have the base cost)
  return alt == 0 && DecodeAlignedMode() == 3 ? DecodePieceCostTiles(config) : alt;
}

int DecodeModelPieceTenths() {
  static const int tenths = [] {
    const int n = EnvInt("HPC_XLA_DECODE_MODEL_PIECE", -1);
    return n >= 0 && n <= 200 ? n : attention::kModelPieceTenths;
  }();
  return tenths;
}

int DecodeAlignedMode() {
  static const int mode = [] {
    const int n = EnvInt("HPC_XLA_DECODE_ALIGNED", -1);
    return n >= 0 && n <= 3 ? n : 1;
  }();
  return mode;
}

int DecodePlanEarlyTrigger() {
  static const int trigger = EnvInt("HPC_XLA_DECODE_PLAN_TRIGGER", 0) == 1 ? 1 : 0;
  return trigger;
}

int DecodeMinCapacityTiles() {
  static const int tiles = [] {
    const int n = EnvInt("HPC_XLA_DECODE_MIN_TILES", 0);
    return n >= 1 && n <= 64 ? n : attention::kMinCapacityTiles;
  }();
  return tiles;
}

}  // namespace hpc
