// fused_moe on sm_90a: kernels chained with PDL (Launch() + PdlWait()), no host sync, no allocation, launch
// configuration from shapes only (CUDA-graph / XLA command-buffer safe). Two paths, picked by the M tile
// (fused_moe_plan.h); both start with the same align kernel:
//   1. align     (1 CTA; grouped path: a count kernel + one CTA per chunk of pairs, moe::AlignCtas)
//                          counting pass over topk_ids -> pairs sorted by expert (stable by pair index) + the
//                          tile list (tiled path) | per-expert counts/first rows and pair -> row (grouped path)
// Tiled path (v1, this file, M tile 16/32/64):
//   2. quant     (fp8 with bf16 x only) x -> e4m3 (static a13 | per token per 128 columns, scale = amax/448)
//   3. gate-up   grouped GEMM (moe_gemm.cuh): gathered x rows x w13[e] gate and up -> silu(gate)*up -> the
//                intermediate (bf16 | e4m3 + scales), rows in sorted order
//   4. down      grouped GEMM: intermediate x w2[e] -> fp32 down row of each pair
//   5. reduce    y[t] = sum_j (j order) w[t,j] * down[t*k+j] over local experts (+ shared_output) -> bf16
// Grouped path (M tile 128): fused_moe_grouped.cu (CUTLASS WGMMA grouped GEMMs).
// Stream path (M tile 8, decode regime): fused_moe_stream.cu (two kernels, no align).
// Fused routing (FusedMoeArgs::route, router_logits given): moe_route's kernel runs first, writing topk_weights /
// topk_ids (the op's outputs), which every path then reads. (Routing inside the stream kernels' CTAs was measured
// and lost: bench/NOTES.md, session 55, experiments 76 / 77.)
// Workspace layout and the M tile: fused_moe_plan.h. The GEMMs work on (N block, tile, K split) items, each CTA
// a contiguous range of them (moe_gemm.cuh): a persistent grid for fp8_tensor and split gate-ups, one CTA per item
// otherwise (LaunchGemm). Every kernel calls PdlWait() before anything else (the quant kernel: before it ends, see
// there), so each one waits for the complete previous kernel, transitively for all earlier ones (and for the
// previous op on the stream).
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/device_check.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/vec.cuh"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_grouped.h"
#include "csrc/moe/fused_moe_plan.h"
#include "csrc/moe/fused_moe_stream.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/moe_gemm.cuh"

namespace hpc {
namespace {

using moe::GemmKind;
using moe::GemmParams;
using moe::GemmShape;

// ---------------------------------------------------------------------------------------------- 1. align
constexpr int kAlignThreads = 1024;
constexpr int kAlignWarps = kAlignThreads / 32;

struct AlignParams {
  const int32_t* ids;  // [T*k]
  int32_t* header;     // [0] = tiles (tiled) | local rows (grouped)
  int32_t* tile_expert;  // tiled path: [max_tiles]
  int32_t* sorted_pairs;
  // grouped path (tile_m = 1: no padding), else null
  int32_t* expert_count;  // [E]
  int32_t* expert_first;  // [E]
  int32_t* pair_row;      // [T*k] sorted row of each pair, -1 if its expert is not local
  int32_t* zero;          // tiled path with gate-up K splits: the GEMM's arrival counters, zeroed here; else null
  int zero_count;
  // multi-CTA align (grouped path, moe::AlignCtas): CTA c sorts pairs [c * chunk, (c + 1) * chunk) after the
  // earlier chunks' pairs of each expert; chunk_counts [gridDim.x, experts] from MoeAlignCountKernel. One CTA:
  // chunk = pairs, chunk_counts null.
  const int32_t* chunk_counts;
  int chunk;
  int pairs, experts, expert_offset, tile_m;
};

// Multi-CTA align, first pass: CTA c counts the local pairs of its chunk per expert -> counts[c, experts].
constexpr int kAlignCountThreads = 256;
__global__ void __launch_bounds__(kAlignCountThreads) MoeAlignCountKernel(const __grid_constant__ AlignParams p,
                                                                          int32_t* counts) {
  extern __shared__ int32_t hist[];  // [experts]
  const int tid = threadIdx.x;
  PdlWait();
  PdlLaunchDependents();
  for (int e = tid; e < p.experts; e += kAlignCountThreads) hist[e] = 0;
  __syncthreads();
  const int begin = min(p.pairs, static_cast<int>(blockIdx.x) * p.chunk), end = min(p.pairs, begin + p.chunk);
  for (int i = begin + tid; i < end; i += kAlignCountThreads) {
    const int e = p.ids[i] - p.expert_offset;
    if (e >= 0 && e < p.experts) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  for (int e = tid; e < p.experts; e += kAlignCountThreads) counts[blockIdx.x * p.experts + e] = hist[e];
}

// Each warp owns a contiguous segment of pairs. Pass 1 counts per (warp, expert) in shared memory; those counts
// become per-(warp, expert) cursors at base(expert) + pairs of earlier warps; pass 2 walks each segment in order,
// 32 pairs at a time, ranking equal experts inside the 32 with match_any: a stable order by pair index.
// The grouped path runs it with tile_m = 1 (no padding, tiles = rows) and writes counts/first rows instead of
// a tile list, plus the inverse map pair -> row.
__global__ void __launch_bounds__(kAlignThreads) MoeAlignKernel(const __grid_constant__ AlignParams p) {
  using BlockScan = cub::BlockScan<int32_t, kAlignThreads>;
  __shared__ typename BlockScan::TempStorage scan;
  extern __shared__ int32_t cursor[];  // [kAlignWarps][experts]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  PdlWait();
  PdlLaunchDependents();
  const int chunk = blockIdx.x;
  const int r0 = min(p.pairs, chunk * p.chunk), r1 = min(p.pairs, r0 + p.chunk);
  // Segments of at least 32 pairs: few pairs (decode, T*k of 8-512) use few warps, so the per-expert prefix below
  // walks `warps` cursors instead of 32 (it was most of this CTA's serial time at T = 16).
  const int seg = max(32, (r1 - r0 + kAlignWarps - 1) / kAlignWarps);
  const int warps = max(1, (r1 - r0 + seg - 1) / seg);
  for (int i = tid; i < warps * p.experts; i += kAlignThreads) cursor[i] = 0;
  if (chunk == 0) {
    for (int i = tid; i < p.zero_count; i += kAlignThreads) p.zero[i] = 0;
  }
  __syncthreads();
  const int begin = min(r1, r0 + warp * seg), end = min(r1, begin + seg);  // empty for warps >= `warps`
  for (int i = begin + lane; i < end; i += 32) {
    const int e = p.ids[i] - p.expert_offset;
    if (e >= 0 && e < p.experts) atomicAdd(&cursor[warp * p.experts + e], 1);
  }
  __syncthreads();
  // one expert per thread (experts <= 1024): total and per-warp exclusive prefix
  int count = 0;
  if (tid < p.experts) {
    for (int w = 0; w < warps; ++w) {
      const int c = cursor[w * p.experts + tid];
      cursor[w * p.experts + tid] = count;
      count += c;
    }
  }
  // multi-CTA: the expert's pairs in all chunks (total) and in the chunks before this one (before)
  int total = count, before = 0;
  if (p.chunk_counts != nullptr && tid < p.experts) {
    total = 0;
#pragma unroll 8
    for (int c = 0; c < static_cast<int>(gridDim.x); ++c) {
      const int v = p.chunk_counts[c * p.experts + tid];
      before += c < chunk ? v : 0;
      total += v;
    }
  }
  const int tiles = (total + p.tile_m - 1) / p.tile_m;
  int first_tile, total_tiles;
  BlockScan(scan).ExclusiveSum(tiles, first_tile, total_tiles);
  if (tid == 0 && chunk == 0) p.header[0] = total_tiles;
  if (tid < p.experts) {
    const int base = first_tile * p.tile_m;
    if (p.expert_count != nullptr) {
      if (chunk == 0) {
        p.expert_count[tid] = total;
        p.expert_first[tid] = base;
      }
    } else {  // tiled path: always one CTA
      for (int t = 0; t < tiles; ++t) p.tile_expert[first_tile + t] = tid;
      for (int r = base + total; r < base + tiles * p.tile_m; ++r) p.sorted_pairs[r] = -1;  // padding
    }
    for (int w = 0; w < warps; ++w) cursor[w * p.experts + tid] += base + before;
  }
  __syncthreads();
  for (int i0 = begin; i0 < end; i0 += 32) {
    const int i = i0 + lane;
    int e = i < end ? p.ids[i] - p.expert_offset : -1;
    if (e < 0 || e >= p.experts) e = -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(same & ((1u << lane) - 1u));
    int* cur = e >= 0 ? &cursor[warp * p.experts + e] : nullptr;
    const int pos = e >= 0 ? *cur + rank : 0;
    __syncwarp();
    if (e >= 0) {
      p.sorted_pairs[pos] = i;
      if (rank == 0) *cur += __popc(same);
    }
    if (p.pair_row != nullptr && i < end) p.pair_row[i] = e >= 0 ? pos : -1;
    __syncwarp();
  }
}

// ------------------------------------------------------------------------------------- 2. activation quant
struct QuantParams {
  const __nv_bfloat16* x;
  uint8_t* xq;
  float* xq_scale;           // block128: [T, H/128]
  const float* static_scale;  // fp8_tensor: a13
  int64_t vectors;           // T * H / 8
  int hidden;
  bool block;
};

constexpr int kQuantThreads = 256;

// Groups of 16 lanes own 128 consecutive columns of one token (8 per lane): exactly one block128 block.
// The one kernel that waits at its END: x is complete when it starts (align, which launches it, has waited for the
// op's predecessors), and xq's last reader (the previous call's gate-up GEMM, or gather on the grouped path)
// finished before that; the wait only keeps this grid from completing before align, whose tile list / row ranges the
// next kernels (which wait for us) read. So the quantization overlaps the align kernel instead of following it.
__global__ void __launch_bounds__(kQuantThreads) MoeQuantKernel(const __grid_constant__ QuantParams p) {
  PdlLaunchDependents();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kQuantThreads + threadIdx.x;
  const bool valid = v < p.vectors;  // vectors is a multiple of 16: groups are all valid or all not
  float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (valid) LoadVec8(p.x + v * 8, x);
  float scale;
  if (p.block) {
    scale = moe::Block128Scale(x);
    if (valid && threadIdx.x % 16 == 0) p.xq_scale[v / 16] = scale;  // (token, block) = (v*8) / 128 in [T, H/128]
  } else {
    scale = *p.static_scale;
  }
  if (valid) StoreE4M3x8(p.xq + v * 8, x, scale);
  PdlWait();
}

// ------------------------------------------------------------------------------------------- launcher
using moe::AllowSmem;

// The GEMMs' grid: persistent (at most one wave: resident CTAs per SM x SMs, each CTA a contiguous range of items)
// for the fp8_tensor wgmma kernels and for a gate-up with K splits; else one CTA per possible item (CTAs past the
// real items exit at once). Measured on the H200 (bench/NOTES.md, session 17): the persistent grid lost on the bf16
// mma.sync kernels -- Qwen3-30B T=8-64 +3-5 us, Mixtral T=64 +41% (384 items of 3.6 MB on 264 CTAs: 192 CTAs took
// two items each while 72 idled) -- and is part of the fp8_tensor set that gained (Qwen3 T=8 89 -> 83 us, Hy3-TP8
// T=16 111 -> 99); with K splits one CTA per possible item is S times as many CTAs, nearly all exiting at once
// (DeepSeek-V3 EP8 block128 T=8, one CTA per SM: 4352 CTAs, 110 -> 142 us). HPC_XLA_MOE_PERSIST=1 / 0 forces
// either grid (A/B runs).
template <GemmKind KIND, MoeQuant Q, int BM>
Status LaunchGemm(const GemmParams& gp, int64_t max_tiles, int device, cudaStream_t stream) {
  using S = GemmShape<KIND, Q, BM>;
  auto* fn = &moe::MoeGemmKernel<KIND, Q, BM>;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(fn), S::kSmemBytes));
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(reinterpret_cast<const void*>(fn), moe::kGemmThreads, S::kSmemBytes,
                                        "fused_moe GEMM occupancy", &per_sm));
  static const int knob = EnvInt("HPC_XLA_MOE_PERSIST", -1);
  const bool persist = knob < 0 ? S::kWgmma || gp.splits > 1 : knob != 0;
  const int64_t max_items = max_tiles * ((gp.n + S::kBN - 1) / S::kBN) * gp.splits;
  if (max_items > INT32_MAX) {  // the kernel indexes items with int (only a forced v1 path at huge T gets here)
    return Status::InvalidArgument("fused_moe: the tiled path's GEMM has " + std::to_string(max_items) +
                                   " work items, more than 2^31 - 1; use fewer tokens per call or the default path");
  }
  const int64_t wave = static_cast<int64_t>(per_sm) * MultiprocessorCount(device);
  const int64_t grid = persist ? std::min(max_items, wave) : max_items;
  return Launch(KIND == GemmKind::kGateUp ? "fused_moe gate-up GEMM launch" : "fused_moe down GEMM launch", fn,
                dim3(static_cast<unsigned>(grid)), dim3(moe::kGemmThreads), S::kSmemBytes, stream, gp);
}

template <MoeQuant Q, int BM>
Status LaunchGemms(const GemmParams& up, const GemmParams& down, int64_t max_tiles, int device, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR((LaunchGemm<GemmKind::kGateUp, Q, BM>(up, max_tiles, device, stream)));
  return LaunchGemm<GemmKind::kDown, Q, BM>(down, max_tiles, device, stream);
}

template <MoeQuant Q>
Status DispatchTile(int tile_m, const GemmParams& up, const GemmParams& down, int64_t max_tiles, int device,
                    cudaStream_t s) {
  switch (tile_m) {
    case 16: return LaunchGemms<Q, 16>(up, down, max_tiles, device, s);
    case 32: return LaunchGemms<Q, 32>(up, down, max_tiles, device, s);
    case 64: return LaunchGemms<Q, 64>(up, down, max_tiles, device, s);
    default: return Status::Internal("fused_moe: no kernel for M tile " + std::to_string(tile_m));
  }
}

// HPC_XLA_CHECK=1: the ids must be below num_experts_global (negative ones are skipped, as everywhere; copies them
// to the host; syncs). Skipped while the stream is captured (vLLM captures its MoE layers inside CUDA graphs).
Status CheckIdsOnDevice(const FusedMoeArgs& a, int64_t global, cudaStream_t stream) {
  const int64_t n = a.topk_ids.numel(), top_k = a.topk_ids.shape[1];
  std::vector<int32_t> ids(n);
  bool skipped = false;
  HPC_RETURN_IF_ERROR(CopyForCheck(stream, "fused_moe check", a.topk_ids.data, ids.data(), n * 4, &skipped));
  if (skipped) return Status::Ok();
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] >= global) {
      return ArgCheck("fused_moe").Fail("topk_ids[" + std::to_string(i / top_k) + ", " + std::to_string(i % top_k) +
                                        "] = " + std::to_string(ids[i]) + " is not below num_experts_global=" +
                                        std::to_string(global) + " (negative ids are skipped) (HPC_XLA_CHECK)");
    }
  }
  return Status::Ok();
}

Status CheckTracedOffsetOnDevice(const FusedMoeArgs& a, cudaStream_t stream) {
  if (!a.traced_offset.present()) return Status::Ok();
  int32_t value = 0;
  bool skipped = false;
  HPC_RETURN_IF_ERROR(CopyForCheck(stream, "fused_moe check", a.traced_offset.data, &value, 4, &skipped));
  if (skipped) return Status::Ok();
  const Status s = CheckTracedOffset(a, value);
  return s.ok() ? s : Status::InvalidArgument(s.message() + " (HPC_XLA_CHECK)");
}

}  // namespace

Status FusedMoeCuda(const FusedMoeArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateFusedMoeCuda(a));
  if (a.x.device != DeviceKind::kCuda) return Status::Internal("fused_moe: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.x.device_id));
  const int64_t tokens = a.x.shape[0], hidden = a.x.shape[1], experts = a.w13.shape[0], inter = a.w13.shape[1] / 2;
  const int64_t top_k = a.topk_ids.shape[1];
  if (tokens == 0) return Status::Ok();
  const int64_t global = GlobalExperts(a);
  if (DeviceChecksEnabled()) {
    HPC_RETURN_IF_ERROR(CheckTracedOffsetOnDevice(a, stream));  // first: a bad one folds ids the next check blames
    if (!Routed(a)) HPC_RETURN_IF_ERROR(CheckIdsOnDevice(a, global, stream));  // (routed: the op writes them)
    for (const auto& [name, t, zero_ok] : {std::tuple<const char*, const TensorView*, bool>{"a13_scale", &a.a13_scale, false},
                                          {"a2_scale", &a.a2_scale, false}, {"w13_scale", &a.w13_scale, true},
                                          {"w2_scale", &a.w2_scale, true}, {"x_scale", &a.x_scale, true}}) {
      HPC_RETURN_IF_ERROR(CheckScalesOnDevice("fused_moe", name, *t, stream, zero_ok));
    }
  }
  const moe::MoePlan plan = FusedMoePlanOf(a);
  if (Routed(a)) HPC_RETURN_IF_ERROR(LaunchMoeRoute(a.route, stream));  // the pipeline's first stage (PDL-chained)
  if (plan.stream) return moe::RunStreamMoe(a, plan, stream);
  uint8_t* ws = a.workspace.ptr<uint8_t>();
  int32_t* header = reinterpret_cast<int32_t*>(ws + plan.header);
  int32_t* tile_expert = reinterpret_cast<int32_t*>(ws + plan.tile_expert);
  int32_t* sorted_pairs = reinterpret_cast<int32_t*>(ws + plan.sorted_pairs);
  const bool fp8 = a.quant != MoeQuant::kNone, block = a.quant == MoeQuant::kFp8Block128;
  const int elem = fp8 ? 1 : 2;

  // 1. align
  AlignParams ap = {};
  ap.ids = a.topk_ids.ptr<const int32_t>();
  ap.header = header;
  ap.tile_expert = tile_expert;
  ap.sorted_pairs = sorted_pairs;
  ap.pairs = static_cast<int>(plan.pairs);
  ap.experts = static_cast<int>(experts);
  ap.expert_offset = static_cast<int>(a.expert_offset);
  ap.tile_m = plan.tile_m;
  if (plan.grouped) {  // unpadded rows per expert: counts, first rows and pair -> row instead of a tile list
    ap.tile_m = 1;
    ap.tile_expert = nullptr;
    ap.expert_count = reinterpret_cast<int32_t*>(ws + plan.expert_count);
    ap.expert_first = reinterpret_cast<int32_t*>(ws + plan.expert_first);
    ap.pair_row = reinterpret_cast<int32_t*>(ws + plan.pair_row);
  } else if (plan.up_splits > 1) {
    ap.zero = reinterpret_cast<int32_t*>(ws + plan.up_arrivals);
    ap.zero_count = static_cast<int>(plan.up_units);
  }
  const int align_ctas = plan.grouped ? moe::AlignCtas(plan.pairs) : 1;
  ap.chunk = static_cast<int>((plan.pairs + align_ctas - 1) / align_ctas);
  if (align_ctas > 1) {
    int32_t* counts = reinterpret_cast<int32_t*>(ws + plan.align_counts);
    HPC_RETURN_IF_ERROR(Launch("fused_moe align count launch", MoeAlignCountKernel, dim3(align_ctas),
                               dim3(kAlignCountThreads), static_cast<int>(experts * 4), stream, ap, counts));
    ap.chunk_counts = counts;
  }
  const int align_smem = static_cast<int>(kAlignWarps * experts * 4);
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(&MoeAlignKernel), kAlignWarps * kMaxMoeCudaExperts * 4));
  HPC_RETURN_IF_ERROR(Launch("fused_moe align launch", MoeAlignKernel, dim3(align_ctas), dim3(kAlignThreads),
                             align_smem, stream, ap));

  // 2. activation quant (fp8 with bf16 x), once per token -- unless the grouped path quantizes in its gather (per
  // row, or per token with HPC_XLA_MOE_GATHER=tokens)
  const uint8_t* a_x = static_cast<const uint8_t*>(a.x.data);
  const float* a_x_scale = block ? a.x_scale.ptr<const float>() : nullptr;
  const bool quant_in_gather = plan.grouped && (moe::GroupedGatherByTokens(top_k) ||
                                                moe::GroupedQuantizeInGather(tokens, plan.pairs, experts, global));
  if (fp8 && a.x.dtype == DType::kBF16 && !quant_in_gather) {
    // x_q's room is what the plan left before x_q_scale (MakeMoePlan drops it under the token gather, by the same
    // predicate as above): refuse rather than write over the next region should the two ever disagree
    if (plan.x_q_scale - plan.x_q < tokens * hidden) {
      return Status::Internal("fused_moe: the workspace plan has no room for the quantized x the quant kernel writes");
    }
    QuantParams qp = {};
    qp.x = a.x.ptr<const __nv_bfloat16>();
    qp.xq = ws + plan.x_q;
    qp.xq_scale = block ? reinterpret_cast<float*>(ws + plan.x_q_scale) : nullptr;
    qp.static_scale = block ? nullptr : a.a13_scale.ptr<const float>();
    qp.vectors = tokens * hidden / 8;
    qp.hidden = static_cast<int>(hidden);
    qp.block = block;
    const dim3 grid(static_cast<unsigned>((qp.vectors + kQuantThreads - 1) / kQuantThreads));
    HPC_RETURN_IF_ERROR(Launch("fused_moe quant launch", MoeQuantKernel, grid, dim3(kQuantThreads), 0, stream, qp));
    a_x = qp.xq;
    a_x_scale = qp.xq_scale;
  }

  if (plan.grouped) return moe::RunGroupedMoe(a, plan, a_x, a_x_scale, stream);

  // 3./4. grouped GEMMs
  GemmParams up = {};
  up.a = a_x;
  up.a_scale = a_x_scale;
  up.b = static_cast<const uint8_t*>(a.w13.data);
  up.b_scale = fp8 ? a.w13_scale.ptr<const float>() : nullptr;
  up.a_tensor_scale = a.quant == MoeQuant::kFp8Tensor ? a.a13_scale.ptr<const float>() : nullptr;
  up.out_tensor_scale = a.quant == MoeQuant::kFp8Tensor ? a.a2_scale.ptr<const float>() : nullptr;
  up.sorted_pairs = sorted_pairs;
  up.tile_expert = tile_expert;
  up.tile_count = header;
  up.out = ws + plan.inter;
  up.out_scale = block ? reinterpret_cast<float*>(ws + plan.inter_scale) : nullptr;
  up.k_bytes = hidden * elem;
  up.b_expert_bytes = 2 * inter * hidden * elem;
  up.k_blocks = static_cast<int>(hidden / kMoeBlock);
  up.n = static_cast<int>(inter);
  up.top_k = static_cast<int>(top_k);
  up.pairs = static_cast<int>(plan.pairs);
  up.splits = plan.up_splits;
  up.split_k_tiles = moe::SplitKTiles(moe::TiledKTiles(hidden, a.quant), plan.up_splits);
  up.partial = plan.up_splits > 1 ? reinterpret_cast<float*>(ws + plan.up_partial) : nullptr;
  up.arrivals = plan.up_splits > 1 ? reinterpret_cast<int32_t*>(ws + plan.up_arrivals) : nullptr;
  up.w13_n0_mask = a.w13_interleaved ? ~0 : 0;
  up.w13_up_delta = static_cast<int>(W13UpDelta(inter, a.w13_interleaved));

  GemmParams down = up;
  down.a = ws + plan.inter;
  down.a_scale = up.out_scale;
  down.b = static_cast<const uint8_t*>(a.w2.data);
  down.b_scale = fp8 ? a.w2_scale.ptr<const float>() : nullptr;
  down.a_tensor_scale = up.out_tensor_scale;
  down.out_tensor_scale = nullptr;
  down.out = ws + plan.down;
  down.out_scale = nullptr;
  down.k_bytes = inter * elem;
  down.b_expert_bytes = hidden * inter * elem;
  down.k_blocks = static_cast<int>(inter / kMoeBlock);
  down.n = static_cast<int>(hidden);
  down.splits = 1;
  down.split_k_tiles = moe::TiledKTiles(inter, a.quant);
  down.partial = nullptr;
  down.arrivals = nullptr;
  down.w13_n0_mask = 0, down.w13_up_delta = 0;

  if (plan.max_tiles > 0) {
    switch (a.quant) {
      case MoeQuant::kNone:
        HPC_RETURN_IF_ERROR(DispatchTile<MoeQuant::kNone>(plan.tile_m, up, down, plan.max_tiles, a.x.device_id, stream));
        break;
      case MoeQuant::kFp8Tensor:
        HPC_RETURN_IF_ERROR(DispatchTile<MoeQuant::kFp8Tensor>(plan.tile_m, up, down, plan.max_tiles, a.x.device_id, stream));
        break;
      default:
        HPC_RETURN_IF_ERROR(DispatchTile<MoeQuant::kFp8Block128>(plan.tile_m, up, down, plan.max_tiles, a.x.device_id, stream));
    }
  }

  // 5. reduce
  moe::ReduceParams<float> rp = {};
  rp.down = reinterpret_cast<const float*>(ws + plan.down);
  rp.weights = a.topk_weights.ptr<const float>();
  rp.ids = a.topk_ids.ptr<const int32_t>();
  rp.shared = a.shared_output.present() ? a.shared_output.ptr<const __nv_bfloat16>() : nullptr;
  rp.out = a.out.ptr<__nv_bfloat16>();
  rp.hidden = static_cast<int>(hidden);
  rp.top_k = static_cast<int>(top_k);
  rp.experts = static_cast<int>(experts);
  rp.expert_offset = static_cast<int>(a.expert_offset);
  return moe::LaunchMoeReduce(rp, tokens, global, a.x.device_id, stream);
}

}  // namespace hpc
