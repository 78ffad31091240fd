// CPU reference of decode_plan / decode_attention. It executes the SAME schedule as the GPU: the plan's pieces
// CTA by CTA, 64-token tiles with an online softmax per tile, partials merged by log-sum-exp in CTA order
// (static schedule: fixed splits). fp32 arithmetic; P rounded to the compute dtype before P.V like the GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "csrc/attention/decode.h"
#include "csrc/attention/decode_plan.h"
#include "csrc/common/check.h"
#include "csrc/ref/element_access.h"

namespace hpc {
namespace {

using attention::kTileTokens;
using ref::LoadFloat;
using ref::Offset;
using ref::StoreFloat;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// A NaN score (NaN in q or in a visible K) or partial wins: its row's output is NaN, as in any softmax, where
// std::max would drop it and leave zeros (the GPU kernels' NaN flows through l and O the same way).
float NanMax(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
}

// Unnormalized attention state of one piece for the M = q_len * group rows of a (sequence, kv head).
struct PieceState {
  int rows, dim;
  std::vector<float> o, m, l;
  PieceState(int r, int d) : rows(r), dim(d), o(static_cast<size_t>(r) * d, 0.f), m(r, kNegInf), l(r, 0.f) {}
};

float RoundTo(DType dtype, float x) {
  return dtype == DType::kF16 ? ToFloat(FromFloat<__half>(x)) : ToFloat(FromFloat<__nv_bfloat16>(x));
}

PieceState RunPiece(const DecodeAttentionArgs& a, const DecodeConfig& cfg, int b, int h, int tile_begin,
                    int tile_end) {
  const int group = cfg.num_q_heads / cfg.num_kv_heads, rows = a.q_len * group, dim = cfg.head_dim;
  // fp16 math for fp16 inputs and for fp8 caches (e4m3 -> f16 is one instruction on the GPU), else bf16
  const DType compute = a.q.dtype == DType::kF16 || a.k_cache.dtype == DType::kF16 || a.k_cache.dtype == DType::kF8E4M3
                            ? DType::kF16 : DType::kBF16;
  const bool fp8_cache = a.k_cache.dtype == DType::kF8E4M3;
  const float k_scale = fp8_cache ? a.k_scale.ptr<const float>()[0] : 1.0f;
  const int len = a.seq_lens.ptr<const int32_t>()[b];
  const int page = cfg.page_size;
  std::vector<float> q(static_cast<size_t>(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    const int j = r / group, head = h * group + r % group, row = b * a.q_len + j;
    const float qs = a.q_scale.present() ? a.q_scale.ptr<const float>()[row * cfg.num_q_heads + head] : 1.0f;
    for (int d = 0; d < dim; ++d) q[r * dim + d] = RoundTo(compute, LoadFloat(a.q, Offset(a.q, row, head, d)) * qs);
  }
  const float s_scale = a.sm_scale * kLog2e * k_scale;
  PieceState st(rows, dim);
  std::vector<float> s(kTileTokens);
  for (int t = tile_begin; t < tile_end; ++t) {
    const int tok0 = t * kTileTokens, ntok = std::min(kTileTokens, len - tok0);
    for (int r = 0; r < rows; ++r) {
      const int last_visible = len - a.q_len + r / group;  // causal among the new tokens
      float tile_max = kNegInf;
      for (int i = 0; i < ntok; ++i) {
        const int tok = tok0 + i;
        if (tok > last_visible) { s[i] = kNegInf; continue; }
        const int blk = a.block_table.ptr<const int32_t>()[b * a.block_table.strides[0] + tok / page];
        const int64_t off = Offset(a.k_cache, blk, tok % page, h);
        float acc = 0.f;
        for (int d = 0; d < dim; ++d) acc += q[r * dim + d] * LoadFloat(a.k_cache, off + d);
        s[i] = acc * s_scale;
        tile_max = NanMax(tile_max, s[i]);
      }
      if (tile_max == kNegInf) continue;  // nothing visible for this row in this tile
      const float m_new = NanMax(st.m[r], tile_max);
      const float alpha = std::exp2(st.m[r] - m_new);
      st.l[r] *= alpha;
      for (int d = 0; d < dim; ++d) st.o[r * dim + d] *= alpha;
      for (int i = 0; i < ntok; ++i) {
        if (s[i] == kNegInf) continue;
        const float p = std::exp2(s[i] - m_new);
        st.l[r] += p;
        const float pr = RoundTo(compute, p);
        const int tok = tok0 + i;
        const int blk = a.block_table.ptr<const int32_t>()[b * a.block_table.strides[0] + tok / page];
        const int64_t off = Offset(a.v_cache, blk, tok % page, h);
        for (int d = 0; d < dim; ++d) st.o[r * dim + d] += pr * LoadFloat(a.v_cache, off + d);
      }
      st.m[r] = m_new;
    }
  }
  return st;
}

// Normalized rows -> out (b, h); includes the v_scale of an fp8 cache.
void WriteOutput(const DecodeAttentionArgs& a, const DecodeConfig& cfg, int b, int h, const float* o, int rows) {
  const int group = cfg.num_q_heads / cfg.num_kv_heads;
  for (int r = 0; r < rows; ++r) {
    const int row = b * a.q_len + r / group, head = h * group + r % group;
    for (int d = 0; d < cfg.head_dim; ++d) StoreFloat(a.out, Offset(a.out, row, head, d), o[r * cfg.head_dim + d]);
  }
}

// Partial slot layout in the workspace: O [slots][rows][dim] then lse [slots][rows] (log2 domain).
struct Partials {
  float* base;
  int64_t slots;
  int rows, dim;
  float* o(int64_t slot) const { return base + slot * rows * dim; }
  float* lse(int64_t slot) const { return base + slots * rows * dim + slot * rows; }
};

void StorePartial(const Partials& p, int64_t slot, const PieceState& st, float v_scale) {
  for (int r = 0; r < st.rows; ++r) {
    const bool empty = st.l[r] == 0.f;
    p.lse(slot)[r] = empty ? kNegInf : st.m[r] + std::log2(st.l[r]);
    for (int d = 0; d < st.dim; ++d) p.o(slot)[r * st.dim + d] = empty ? 0.f : st.o[r * st.dim + d] / st.l[r] * v_scale;
  }
}

void Normalize(PieceState& st, float v_scale) {
  for (int r = 0; r < st.rows; ++r) {
    for (int d = 0; d < st.dim; ++d) {
      st.o[r * st.dim + d] = st.l[r] == 0.f ? 0.f : st.o[r * st.dim + d] / st.l[r] * v_scale;
    }
  }
}

// Merge slots (in the given order) by log-sum-exp into `out` rows.
void MergeSlots(const Partials& p, const std::vector<int64_t>& slots, std::vector<float>& out) {
  out.assign(static_cast<size_t>(p.rows) * p.dim, 0.f);
  for (int r = 0; r < p.rows; ++r) {
    float mx = kNegInf;
    for (int64_t s : slots) mx = NanMax(mx, p.lse(s)[r]);
    if (mx == kNegInf) continue;
    float denom = 0.f;
    for (int64_t s : slots) {
      const float w = std::exp2(p.lse(s)[r] - mx);
      denom += w;
      for (int d = 0; d < p.dim; ++d) out[r * p.dim + d] += w * p.o(s)[r * p.dim + d];
    }
    for (int d = 0; d < p.dim; ++d) out[r * p.dim + d] /= denom;
  }
}

Status CheckData(const DecodeAttentionArgs& a, const DecodeConfig& cfg) {
  ArgCheck c("decode_attention");
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("k_scale", a.k_scale));
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("v_scale", a.v_scale));
  // an fp8 q's per-(token, head) scales: 0 is rope_norm's for an all-zero row, never negative or NaN
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("q_scale", a.q_scale, /*zero_ok=*/true));
  const int64_t batch = a.seq_lens.shape[0], max_blocks = a.block_table.shape[1], num_blocks = a.k_cache.shape[0];
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = a.seq_lens.ptr<const int32_t>()[b];
    if (len != 0 && (len < a.q_len || len > max_blocks * cfg.page_size)) {
      return c.Fail("seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " must be 0 or in [q_len=" +
                    std::to_string(a.q_len) + ", max_blocks * page_size = " + std::to_string(max_blocks * cfg.page_size) +
                    "] (block_table is [B, " + std::to_string(max_blocks) + "])");
    }
    for (int64_t i = 0; i < (len + cfg.page_size - 1) / cfg.page_size; ++i) {
      const int64_t blk = a.block_table.ptr<const int32_t>()[b * a.block_table.strides[0] + i];
      if (blk < 0 || blk >= num_blocks) {
        return c.Fail("block_table[" + std::to_string(b) + ", " + std::to_string(i) + "] = " + std::to_string(blk) +
                      " is outside [0, " + std::to_string(num_blocks) + ") (k_cache.shape[0])");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

void BuildPlanHost(const int32_t* seq_lens, int batch, const DecodeConfig& cfg, int max_ctas, int32_t* plan) {
  using namespace attention;
  int piece_cost = DecodePieceCostTiles(cfg);
  const int alt_cost = DecodeAlternativePieceCostTiles(cfg), model_tenths = DecodeModelPieceTenths();
  const int min_tiles = DecodeMinCapacityTiles();
  int64_t aligned_q = 0;  // > 0: the aligned layout of that chunk
  if (PlanChooses(batch, max_ctas, alt_cost, model_tenths)) {  // (as the GPU planner chooses)
    std::vector<int64_t> tile_prefix(batch + 1, 0), unit_prefix(batch + 1, 0);
    for (int b = 0; b < batch; ++b) {
      const int n = TilesOf(seq_lens[b]);
      tile_prefix[b + 1] = tile_prefix[b] + n;
      unit_prefix[b + 1] = unit_prefix[b] + (n > 0 ? 1 : 0);
    }
    const auto tiles = [&](int b) { return tile_prefix[b]; };
    const auto units = [&](int b) { return unit_prefix[b]; };
    using Layout = CostLayout<decltype(tiles), decltype(units)>;
    const Layout base{tiles, units, batch, cfg.num_kv_heads, piece_cost, max_ctas, min_tiles};
    const Layout alt{tiles, units, batch, cfg.num_kv_heads, alt_cost, max_ctas, min_tiles};
    const int64_t base_tenths = base.ModeledMakespan(model_tenths, 0, 1);
    const int64_t alt_tenths = alt.ModeledMakespan(model_tenths, 0, 1);
    if (alt_tenths < base_tenths) piece_cost = alt_cost;
    const int mode = DecodeAlignedMode();
    if (mode > 0 && tile_prefix[batch] > 0) {
      const int64_t low = AlignedLowChunk(tile_prefix[batch], cfg.num_kv_heads, max_ctas, min_tiles);
      for (int64_t q = low; q < low + kAlignedCandidates && aligned_q == 0; ++q) {
        int64_t ctas = 0;
        for (int b = 0; b < batch; ++b) ctas += AlignedCtas(static_cast<int>(tile_prefix[b + 1] - tile_prefix[b]), q);
        if (AlignedFits(ctas, q, cfg.num_kv_heads, max_ctas)) aligned_q = q;
      }
      const int64_t best = alt_tenths < base_tenths ? alt_tenths : base_tenths;
      if (aligned_q > 0 && mode == 1 && !AlignedChosen(aligned_q, model_tenths, best)) aligned_q = 0;
    }
  }
  if (aligned_q > 0) piece_cost = 0;
  int32_t* prefix = PlanPrefix(plan);
  prefix[0] = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t span = aligned_q > 0 ? AlignedSpan(TilesOf(seq_lens[b]), aligned_q) : UnitCost(seq_lens[b], piece_cost);
    prefix[b + 1] = static_cast<int32_t>(prefix[b] + span);
  }
  const int64_t total = static_cast<int64_t>(prefix[batch]) * cfg.num_kv_heads;
  const int64_t capacity = aligned_q > 0 ? aligned_q : CapacityOf(total, max_ctas, min_tiles + piece_cost);
  const int num_ctas = CtasAt(total, capacity);
  int32_t* start = PlanStart(plan, batch);
  for (int i = 0; i <= max_ctas; ++i) {
    int unit, tile;
    LocatePosition(prefix, batch, cfg.num_kv_heads, piece_cost, i <= num_ctas ? i * capacity : total, &unit, &tile);
    start[2 * i] = unit;
    start[2 * i + 1] = tile;
  }
  const int32_t header[kPlanHeaderInts] = {kPlanMagic, kPlanVersion, batch, cfg.num_kv_heads, cfg.num_q_heads,
                                           cfg.head_dim, cfg.q_len, cfg.page_size, static_cast<int32_t>(cfg.kv_dtype),
                                           max_ctas, num_ctas, static_cast<int32_t>(capacity), piece_cost,
                                           prefix[batch], aligned_q > 0 ? 1 : 0, 0};
  for (int i = 0; i < kPlanHeaderInts; ++i) plan[i] = header[i];
}

Status DecodePlanCpu(const DecodePlanArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateDecodePlan(a));
  if (a.seq_lens.device != DeviceKind::kCpu) return Status::Internal("decode_plan: CPU path called with GPU tensors");
  const int batch = static_cast<int>(a.seq_lens.shape[0]);
  // (with the larger of the two piece costs the planner may choose)
  const int most_cost = std::max(DecodePieceCostTiles(a.config), DecodeAlternativePieceCostTiles(a.config));
  int64_t cost = 0;
  for (int b = 0; b < batch; ++b) {
    if (a.seq_lens.ptr<const int32_t>()[b] < 0) {
      return ArgCheck("decode_plan").Fail("seq_lens[" + std::to_string(b) + "] = " +
                                          std::to_string(a.seq_lens.ptr<const int32_t>()[b]) + " is negative");
    }
    cost += attention::UnitCost(a.seq_lens.ptr<const int32_t>()[b], most_cost);
  }
  // The planner's prefix and positions are int32 (the GPU planner's too): the batch's cost over all kv heads,
  // ~ total tokens / 64 * Hkv, must fit.
  if (cost * a.config.num_kv_heads > INT32_MAX) {
    return ArgCheck("decode_plan").Fail("the batch is too long to plan: sum over seq_lens of (64-token tiles + " +
                                        std::to_string(most_cost) + ") * num_kv_heads = " +
                                        std::to_string(cost * a.config.num_kv_heads) + " must be < 2^31");
  }
  BuildPlanHost(a.seq_lens.ptr<const int32_t>(), batch, a.config, a.max_ctas, a.plan.ptr<int32_t>());
  return Status::Ok();
}

Status DecodeAttentionCpu(const DecodeAttentionArgs& a) {
  DecodeConfig cfg;
  HPC_RETURN_IF_ERROR(ValidateDecodeAttention(a, &cfg));
  if (a.q.device != DeviceKind::kCpu) return Status::Internal("decode_attention: CPU path called with GPU tensors");
  HPC_RETURN_IF_ERROR(CheckData(a, cfg));
  const int batch = static_cast<int>(a.seq_lens.shape[0]);
  const int group = cfg.num_q_heads / cfg.num_kv_heads, rows = a.q_len * group, dim = cfg.head_dim;
  const float v_scale = a.k_cache.dtype == DType::kF8E4M3 ? a.v_scale.ptr<const float>()[0] : 1.0f;
  const int32_t* lens = a.seq_lens.ptr<const int32_t>();
  std::vector<float> merged;
  const std::vector<float> zeros(static_cast<size_t>(rows) * dim, 0.f);
  for (int b = 0; b < batch; ++b) {
    if (lens[b] == 0) {
      for (int h = 0; h < cfg.num_kv_heads; ++h) WriteOutput(a, cfg, b, h, zeros.data(), rows);
    }
  }
  if (a.schedule == DecodeSchedule::kDynamic) {
    const int32_t* plan = a.plan.ptr<const int32_t>();
    HPC_RETURN_IF_ERROR(CheckPlanHeader(plan, cfg, batch, a.plan.shape[0]));
    HPC_RETURN_IF_ERROR(CheckPlanLengths(plan, lens, batch));
    const int num_ctas = plan[attention::kFieldNumCtas];
    const Partials parts{a.workspace.ptr<float>(), 2 * static_cast<int64_t>(plan[attention::kFieldMaxCtas]), rows, dim};
    for (int cta = 0; cta < num_ctas; ++cta) {
      attention::PieceCursor cur = attention::CtaPieces(plan, batch, cta);
      attention::Piece piece;
      while (attention::NextPiece(cur, lens, &piece)) {
        PieceState st = RunPiece(a, cfg, piece.b, piece.h, piece.tile_begin, piece.tile_end);
        if (piece.whole) {
          Normalize(st, v_scale);
          WriteOutput(a, cfg, piece.b, piece.h, st.o.data(), rows);
        } else {
          StorePartial(parts, piece.slot, st, v_scale);
        }
      }
    }
    for (int i = 1; i < num_ctas; ++i) {
      attention::MergeTask task;
      if (!attention::MergeTaskAt(plan, i, &task)) continue;
      std::vector<int64_t> slots = {task.first_slot};
      for (int j = task.first_cta + 1; j <= task.last_cta; ++j) slots.push_back(attention::PartialSlot(j, true));
      MergeSlots(parts, slots, merged);
      WriteOutput(a, cfg, task.unit % batch, task.unit / batch, merged.data(), rows);
    }
    return Status::Ok();
  }
  // static schedule: `splits` equal chunks of every (kv head, sequence)
  const int splits = StaticSplits(batch, cfg.num_kv_heads, a.max_ctas);
  const Partials parts{a.workspace.ptr<float>(), static_cast<int64_t>(batch) * cfg.num_kv_heads * splits, rows, dim};
  for (int h = 0; h < cfg.num_kv_heads; ++h) {
    for (int b = 0; b < batch; ++b) {
      const int n = attention::TilesOf(lens[b]);
      if (n == 0) continue;
      const int chunk = (n + splits - 1) / splits;
      if (chunk >= n) {
        PieceState st = RunPiece(a, cfg, b, h, 0, n);
        Normalize(st, v_scale);
        WriteOutput(a, cfg, b, h, st.o.data(), rows);
        continue;
      }
      std::vector<int64_t> slots;
      for (int s = 0; s < splits; ++s) {
        const int64_t slot = (static_cast<int64_t>(h) * batch + b) * splits + s;
        const int t0 = std::min(n, s * chunk), t1 = std::min(n, (s + 1) * chunk);
        StorePartial(parts, slot, RunPiece(a, cfg, b, h, t0, t1), v_scale);
        slots.push_back(slot);
      }
      MergeSlots(parts, slots, merged);
      WriteOutput(a, cfg, b, h, merged.data(), rows);
    }
  }
  return Status::Ok();
}

}  // namespace hpc
