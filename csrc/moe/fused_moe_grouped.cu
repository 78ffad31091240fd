// fused_moe's large-T path on sm_90a (M tile 128). fused_moe.cu runs the align kernel first and, for fp8 with bf16
// x, its quant kernel: x quantized once per token like the reference (fp8_tensor static a13 | fp8_block128 per
// token per 128 columns, scale = amax/448). Then:
//   setup    (1 CTA)  per-group arguments of both grouped GEMMs from the per-expert counts (grouped_gemm_sm90)
//   gather   rows[r] = xq[pair(r) / k] (or x: bf16, or fp8 x as given), + its block scales: a row copy. Rows are
//            contiguous per expert (sorted order, no padding).
//   GEMM1    rows x w13[e]^T -> gate_up bf16 [rows, 2I] in w13's row order (CUTLASS WGMMA grouped GEMM, fp32
//            accumulation)
//   act      silu(gate) * up in fp32 -> intermediate (bf16 | e4m3 static a2 | e4m3 per row per 128 + scales).
//            Skipped where w13 is interleaved and the tiles are 128 rows (bf16 | fp8_tensor) or fp8_tensor's 64-row
//            ones: GEMM1's epilogue writes the intermediate itself (moe_act_epilogue_sm90.h; GroupedGemmActInEpilogue).
//   GEMM2    intermediate x w2[e]^T -> down bf16 [rows, H]
//   reduce   y[t] = sum_j (j order) w[t,j] * down[row(t*k+j)] over local experts (+ shared_output), fp32 -> bf16
// Like the tiled path: no host sync, no allocation, launch configuration from shapes (and the SM count) only;
// every kernel waits (PdlWait) for the complete previous one before reading anything. The gather / act grids are
// capped at a full GPU and walk the real rows (header[0], written by align) grid-stride.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/vec.cuh"
#include "csrc/moe/fused_moe_grouped.h"
#include "csrc/moe/grouped_gemm_sm90.h"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/moe_gemm.cuh"

namespace hpc::moe {
namespace {

// The gather and act kernels: a warp per (sorted row, segment of the row), units grid-stride over the warps of at
// most kRowCtasPerSm CTAs per SM (<= 51 registers). No per-vector 64-bit division (the flattened one-vector-per-thread
// kernels spent most of their instructions on it), and every lane issues its segment's 16-byte loads before its
// stores. Segments rather than whole rows per warp: with few rows (expert parallelism, T <= 1024) a warp walking a
// 7 KB row pass by pass was latency-bound (DeepSeek-V3 EP8 T=256 +17 us, H200, session 20).
// Gathers by tokens in this process (FusedMoeGatherByTokensLaunches: the tests' proof that the form ran).
std::atomic<int64_t> g_gather_by_tokens_launches{0};

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kRowCtasPerSm = 5;

// Enough CTAs for the most units, at most kRowCtasPerSm per SM; they walk the real rows' units (align's count)
// grid-stride, so an EP rank with few local rows launches no flood of CTAs that find nothing to do. Shapes and
// device only.
dim3 RowGrid(int64_t max_rows, int64_t segments, int sms) {
  const int64_t need = (max_rows * segments + kRowWarps - 1) / kRowWarps;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(need, int64_t{sms} * kRowCtasPerSm))));
}

// 16 bytes in one load (a plain uint4 dereference of a bf16 row compiled to four 4-byte loads, seen in SASS), through
// L2: the previous kernel's output.
__device__ __forceinline__ uint4 Load16(const void* src) { return __ldcg(reinterpret_cast<const uint4*>(src)); }

// fp8_block128 quantization of 8 columns: each aligned 16-lane group owns one 128-column block of one row
// (columns % 128 == 0), scale = amax / 448 (the tiled path's MoeQuantKernel and the reference, bit for bit).
// Every lane calls it; only valid lanes store.
__device__ __forceinline__ void StoreBlock128(bool valid, int64_t row, int64_t col, const float (&x)[8], uint8_t* dst,
                                              float* scales, int64_t blocks_per_row) {
  const float scale = Block128Scale(x);
  if (!valid) return;
  if (col % kMoeBlock == 0) scales[row * blocks_per_row + col / kMoeBlock] = scale;
  StoreE4M3x8(dst, x, scale);
}

// ------------------------------------------------------------------------------------------- gather
// rows[r] = x[pair(r) / k] (+ its block scales), in one of two forms (GroupedQuantizeInGather picks):
//   kCopy        a plain row copy: of x (bf16, or fp8 x with its scales) or of x already quantized once per token by
//                MoeQuantKernel (fused_moe.cu) -- where each token is gathered for several local rows;
//   kQuant*      bf16 x quantized per row here (fp8_tensor: static a13 | fp8_block128: per row per 128 columns) --
//                where the local rows are few against the tokens (expert parallelism): one pass over x instead of two.
// Both round like the reference (same bits as the quant kernel). A warp per (row, segment of kGatherSegmentVecs
// 16-byte source vectors); the next unit's pair index is loaded before the current unit's copy. The earlier
// flattened per-pair version (one vector per thread, a 64-bit division each) ran the H200 at ~1.2 TB/s (Qwen3 fp8
// T=4096: 56 us for 67 MB of rows; bench/NOTES.md session 18).
enum class GatherMode : int32_t { kCopy = 0, kQuantTensor = 1, kQuantBlock = 2 };

struct GatherParams {
  const uint8_t* src;           // [T, src_row_bytes]: x (bf16 | e4m3) or x quantized by MoeQuantKernel
  const float* src_scale;       // kCopy of block-scaled rows: [T, H/128] (x_scale or the quant kernel's), else null
  const float* static_scale;    // kQuantTensor: a13
  const int32_t* sorted_pairs;  // [rows] pair of each row
  const int32_t* row_count;     // local rows (align's header[0])
  uint8_t* rows;                // [P, dst_row_bytes]
  float* rows_scale;            // fp8_block128: [P, H/128], else null
  int64_t src_row_bytes, dst_row_bytes;  // multiples of 16 and 8
  int vecs;                     // 16-byte source vectors per row
  int scales_per_row;           // H / 128
  int top_k;
  GatherMode mode;
  const int32_t* pair_row;      // by tokens: [T*k] local row of each pair, -1 for another rank's expert (align's)
  int tokens;                   // by tokens: T
};

constexpr int kGatherUnroll = 4;
constexpr int kGatherSegmentVecs = 32 * kGatherUnroll;  // 16-byte source vectors of a row one warp moves per unit
__host__ __device__ inline int GatherSegments(const GatherParams& p) {
  return (p.vecs + kGatherSegmentVecs - 1) / kGatherSegmentVecs;
}

// A warp's segment of token t's source row: this lane's vectors v0 + 32 i, through L2 (the quant kernel's output).
__device__ __forceinline__ void LoadSegment(const GatherParams& p, int64_t t, int v0, uint4 (&val)[kGatherUnroll]) {
  const uint4* src = reinterpret_cast<const uint4*>(p.src + t * p.src_row_bytes);
#pragma unroll
  for (int i = 0; i < kGatherUnroll; ++i) {
    if (v0 + 32 * i < p.vecs) val[i] = __ldcg(src + v0 + 32 * i);
  }
}

// kCopy: the segment's vectors into sorted row r, and token t's block scales (if any) once per row, from segment 0.
__device__ __forceinline__ void CopySegment(const GatherParams& p, int64_t r, int64_t t, int segment, int v0, int lane,
                                            const uint4 (&val)[kGatherUnroll]) {
  uint8_t* dst = p.rows + r * p.dst_row_bytes;
#pragma unroll
  for (int i = 0; i < kGatherUnroll; ++i) {
    if (v0 + 32 * i < p.vecs) StoreGlobal16(dst + static_cast<int64_t>(v0 + 32 * i) * 16, val[i]);
  }
  if (p.rows_scale != nullptr && segment == 0) {
    for (int c = lane; c < p.scales_per_row; c += 32) {
      p.rows_scale[r * p.scales_per_row + c] = __ldcg(p.src_scale + t * p.scales_per_row + c);
    }
  }
}

template <GatherMode kMode>
__global__ void __launch_bounds__(kRowThreads, kRowCtasPerSm) MoeGatherKernel(const __grid_constant__ GatherParams p) {
  PdlWait();  // src may be the quant kernel's output; sorted_pairs and the row count are align's
  PdlLaunchDependents();
  const int rows = *p.row_count, lane = threadIdx.x % 32;
  const int stride = static_cast<int>(gridDim.x) * kRowWarps;
  const int segments = GatherSegments(p);
  const int units = rows * segments;
  const float mul = kMode == GatherMode::kQuantTensor ? QuantMultiplier(*p.static_scale) : 1.f;
  int u = static_cast<int>(blockIdx.x) * kRowWarps + static_cast<int>(threadIdx.x) / 32;
  int pair = u < units ? __ldcg(p.sorted_pairs + u / segments) : 0;
  for (; u < units; u += stride) {
    const int r = u / segments, segment = u - r * segments;
    const int64_t token = pair / p.top_k;
    pair = u + stride < units ? __ldcg(p.sorted_pairs + (u + stride) / segments) : 0;  // the next unit's, early
    uint8_t* dst = p.rows + static_cast<int64_t>(r) * p.dst_row_bytes;
    const int v0 = segment * kGatherSegmentVecs + lane;
    uint4 val[kGatherUnroll];
    LoadSegment(p, token, v0, val);
    if constexpr (kMode == GatherMode::kCopy) {
      CopySegment(p, r, token, segment, v0, lane, val);
    } else {
      // kQuant*: vector v = 8 bf16 columns [8v, 8v + 8) -> 8 e4m3 bytes; a 16-lane group holds one 128-column block
#pragma unroll
      for (int i = 0; i < kGatherUnroll; ++i) {
        const int v = v0 + 32 * i;
        const bool valid = v < p.vecs;
        float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (valid) UnpackVec8<__nv_bfloat16>(val[i], x);
        if constexpr (kMode == GatherMode::kQuantBlock) {
          StoreBlock128(valid, r, 8 * static_cast<int64_t>(v), x, dst + 8 * v, p.rows_scale, p.scales_per_row);
        } else if (valid) {
          StoreE4M3x8Scaled(dst + 8 * v, x, mul);
        }
      }
    }
  }
}

// The same rows by tokens (experiment 28; the default since session 31, GroupedGatherByTokens): a warp per (token,
// segment of kGatherSegmentVecs source vectors) loads the token's vectors once, converts them once (kQuant*: 8 e4m3
// bytes per vector, the quant kernel's rounding), then stores them into each of the token's local rows (pair_row,
// slots in order). Why: the row form re-reads a token's row for each of its k rows, and for bf16 x with fp8 it needs
// the quant kernel's x_q pass first (Qwen3 fp8 T=4096: quant 5.5 + gather 20.5 us; Hy3-TP8: 11 + 47 us for 32 MB read
// and 134 MB written); here x is read once and only the rows are written. Every lane runs the block128 16-lane max
// (full-mask shuffles), valid or not, as in StoreBlock128.
template <GatherMode kMode>
__global__ void __launch_bounds__(kRowThreads, kRowCtasPerSm)
    MoeGatherTokensKernel(const __grid_constant__ GatherParams p) {
  PdlWait();  // pair_row is align's
  PdlLaunchDependents();
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  const int segments = GatherSegments(p);
  const int64_t units = static_cast<int64_t>(p.tokens) * segments;
  const float mul = kMode == GatherMode::kQuantTensor ? QuantMultiplier(*p.static_scale) : 1.f;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32; u < units; u += stride) {
    const int64_t t = u / segments;
    const int segment = static_cast<int>(u - t * segments);
    const int32_t slot_row = lane < p.top_k ? __ldcg(p.pair_row + t * p.top_k + lane) : -1;  // lane j: slot j's row
    // Under expert parallelism a token may have no local slot at all (DeepSeek-V3 EP8, 32 of 256 experts, top-8:
    // ~34% of tokens): skip its load, warp-uniformly (the vote covers every lane's slot).
    if (!__any_sync(0xffffffffu, slot_row >= 0)) continue;
    const int v0 = segment * kGatherSegmentVecs + lane;
    uint4 val[kGatherUnroll];
    LoadSegment(p, t, v0, val);
    // Each of the token's local rows gets the segment: slots in order; vector by vector for the quantized forms
    // (one vector's 8 bytes and scale live at a time: 48 registers, no spill under the 5-CTA bound).
    auto row_of = [&](int j) { return __shfl_sync(0xffffffffu, slot_row, j); };  // warp-uniform
    if constexpr (kMode == GatherMode::kCopy) {
      for (int j = 0; j < p.top_k; ++j) {
        const int32_t r = row_of(j);
        if (r >= 0) CopySegment(p, r, t, segment, v0, lane, val);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kGatherUnroll; ++i) {
        const int v = v0 + 32 * i;
        const bool valid = v < p.vecs;
        float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (valid) UnpackVec8<__nv_bfloat16>(val[i], x);
        float scale = 0.f, m = mul;
        if constexpr (kMode == GatherMode::kQuantBlock) {
          scale = Block128Scale(x);
          m = QuantMultiplier(scale);
        }
        const uint2 packed = PackE4M3x8Scaled(x, m);
        for (int j = 0; j < p.top_k; ++j) {
          const int32_t r = row_of(j);
          if (r < 0 || !valid) continue;
          StoreGlobal8(p.rows + static_cast<int64_t>(r) * p.dst_row_bytes + 8 * static_cast<int64_t>(v), packed);
          if (kMode == GatherMode::kQuantBlock && (8 * v) % kMoeBlock == 0) {
            p.rows_scale[static_cast<int64_t>(r) * p.scales_per_row + 8 * v / kMoeBlock] = scale;
          }
        }
      }
    }
  }
}

// -------------------------------------------------------------------------------------------- act
struct ActParams {
  const __nv_bfloat16* gate_up;  // [P, 2I]: gate column c at W13GateRow(c), its up column W13UpDelta further
  const int32_t* row_count;
  uint8_t* inter;                // [P, I] bf16 | e4m3
  float* inter_scale;            // fp8_block128: [P, I/128]
  const float* static_scale;     // fp8_tensor: a2
  int64_t inter_dim;             // I
  int vec_per_row;               // I / 8
  MoeQuant quant;
  bool w13_interleaved;          // gate_up's columns in w13's interleaved row order
};

constexpr int kActUnroll = 2;  // 16-byte vectors of gate and of up per lane in flight
constexpr int kActSegmentVecs = 32 * kActUnroll;
__host__ __device__ inline int ActSegments(const ActParams& p) {
  return (p.vec_per_row + kActSegmentVecs - 1) / kActSegmentVecs;
}

// inter[r] = silu(gate) * up of gate_up[r] in fp32 (the reference's h), rounded / quantized: a warp per (row,
// segment of kActSegmentVecs vectors). Lanes past the row still run the block128 16-lane max reductions (full-mask
// shuffles); a 16-lane group covers vectors 16j..16j+15 of the row = one 128-column block (I % 128 == 0 there), all
// valid or all not.
__global__ void __launch_bounds__(kRowThreads, kRowCtasPerSm) MoeActKernel(const __grid_constant__ ActParams p) {
  PdlWait();  // gate_up is GEMM1's
  PdlLaunchDependents();
  const int rows = *p.row_count, lane = threadIdx.x % 32;
  const int stride = static_cast<int>(gridDim.x) * kRowWarps;
  const int segments = ActSegments(p);
  const int units = rows * segments;
  const float mul = p.quant == MoeQuant::kFp8Tensor ? QuantMultiplier(*p.static_scale) : 1.f;
  const int64_t blocks_per_row = p.inter_dim / kMoeBlock;
  for (int u = static_cast<int>(blockIdx.x) * kRowWarps + static_cast<int>(threadIdx.x) / 32; u < units; u += stride) {
    const int r = u / segments, base = (u - r * segments) * kActSegmentVecs;
    const __nv_bfloat16* src = p.gate_up + static_cast<int64_t>(r) * 2 * p.inter_dim;
    const int64_t dst_row = static_cast<int64_t>(r) * p.inter_dim;
    uint4 gate_raw[kActUnroll], up_raw[kActUnroll];
#pragma unroll
    for (int i = 0; i < kActUnroll; ++i) {
      const int v = base + 32 * i + lane;
      if (v < p.vec_per_row) {
        const __nv_bfloat16* gate = src + W13GateRow(8 * v, p.w13_interleaved);  // 8 columns: one 64-block
        gate_raw[i] = Load16(gate);
        up_raw[i] = Load16(gate + W13UpDelta(p.inter_dim, p.w13_interleaved));
      }
    }
#pragma unroll
    for (int i = 0; i < kActUnroll; ++i) {
      const int v = base + 32 * i + lane;
      const bool valid = v < p.vec_per_row;
      const int64_t col = 8 * static_cast<int64_t>(v);
      float h[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (valid) {
        float gate[8], up[8];
        UnpackVec8<__nv_bfloat16>(gate_raw[i], gate);
        UnpackVec8<__nv_bfloat16>(up_raw[i], up);
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = __fmul_rn(Silu(gate[j]), up[j]);
      }
      if (p.quant == MoeQuant::kFp8Block128) {
        StoreBlock128(valid, r, col, h, p.inter + dst_row + col, p.inter_scale, blocks_per_row);
      } else if (valid) {
        if (p.quant == MoeQuant::kNone) {
          StoreVec8(reinterpret_cast<__nv_bfloat16*>(p.inter) + dst_row + col, h);
        } else {
          StoreE4M3x8Scaled(p.inter + dst_row + col, h, mul);
        }
      }
    }
  }
}

}  // namespace

Status RunGroupedMoe(const FusedMoeArgs& a, const MoePlan& plan, const uint8_t* a_x, const float* a_x_scale,
                     cudaStream_t stream) {
  const int64_t tokens = a.x.shape[0], hidden = a.x.shape[1], experts = a.w13.shape[0], inter = a.w13.shape[1] / 2;
  const int64_t top_k = a.topk_ids.shape[1];
  const bool fp8 = a.quant != MoeQuant::kNone, block = a.quant == MoeQuant::kFp8Block128;
  const bool tensor = a.quant == MoeQuant::kFp8Tensor;
  uint8_t* ws = a.workspace.ptr<uint8_t>();
  const int32_t* row_count = reinterpret_cast<const int32_t*>(ws + plan.header);
  const int sms = MultiprocessorCount(a.x.device_id);

  GroupedGemmGroups groups;
  groups.quant = a.quant;
  groups.experts = static_cast<int>(experts);
  groups.expert_count = reinterpret_cast<const int32_t*>(ws + plan.expert_count);
  groups.expert_first = reinterpret_cast<const int32_t*>(ws + plan.expert_first);
  groups.workspace = ws + plan.gemm_ws;
  groups.device = a.x.device_id;
  groups.tile_m = GroupedCtaRows(plan.pairs, experts, a.num_experts_global, a.quant);

  // One grouped GEMM: A rows (+ block scales) from the workspace, B = w with its scales, D into the workspace.
  auto problem = [&](int64_t a_rows, int64_t a_scales, const TensorView& a_scale, const TensorView& w,
                     const TensorView& w_scale, int64_t d, int64_t n, int64_t k, int64_t args) {
    GroupedGemmProblem g;
    g.a = ws + a_rows;
    g.a_scale = block ? reinterpret_cast<const float*>(ws + a_scales) : nullptr;
    g.a_tensor_scale = tensor ? a_scale.ptr<const float>() : nullptr;
    g.b = w.data;
    g.b_scale = fp8 ? w_scale.ptr<const float>() : nullptr;
    g.d = ws + d;
    g.n = n;
    g.k = k;
    g.args = ws + args;
    return g;
  };
  GroupedGemmProblem gate_up = problem(plan.rows, plan.rows_scale, a.a13_scale, a.w13, a.w13_scale, plan.gate_up,
                                       2 * inter, hidden, plan.gemm_args);
  const GroupedGemmProblem down = problem(plan.inter, plan.inter_scale, a.a2_scale, a.w2, a.w2_scale, plan.down, hidden,
                                          inter, plan.gemm_args + experts * kGroupedGemmArgsBytesPerExpert);

  // a_x is the op's bf16 x with fp8 quant exactly when fused_moe.cu left the quantization to the gather
  const bool quantize = fp8 && a.x.dtype == DType::kBF16 && a_x == a.x.data;
  // w13 interleaved on 128-row tiles: GEMM1's epilogue writes the intermediate itself (the act kernel and gate_up
  // are skipped); elsewhere the act kernel reads gate_up in w13's row order.
  const bool act_in_epilogue = GroupedGemmActInEpilogue(a.quant, groups.tile_m, a.w13_interleaved);
  if (act_in_epilogue != plan.act_in_epilogue) {  // the plan gave gate_up no room where the act kernel would need it
    return Status::Internal("fused_moe: the workspace plan and the grouped launcher disagree on the activation's place");
  }
  if (act_in_epilogue) {
    gate_up.act_epilogue = true;
    gate_up.d = ws + plan.inter;
    gate_up.act_scale = tensor ? a.a2_scale.ptr<const float>() : nullptr;
  }

  HPC_RETURN_IF_ERROR(LaunchGroupedGemmSetup(groups, gate_up, down, stream));
  GatherParams gp = {};
  gp.src = a_x;
  gp.src_scale = block && !quantize ? a_x_scale : nullptr;
  gp.static_scale = quantize && tensor ? a.a13_scale.ptr<const float>() : nullptr;
  gp.sorted_pairs = reinterpret_cast<const int32_t*>(ws + plan.sorted_pairs);
  gp.row_count = row_count;
  gp.rows = ws + plan.rows;
  gp.rows_scale = block ? reinterpret_cast<float*>(ws + plan.rows_scale) : nullptr;
  gp.src_row_bytes = hidden * (quantize || !fp8 ? 2 : 1);
  gp.dst_row_bytes = hidden * (fp8 ? 1 : 2);
  gp.vecs = static_cast<int>(gp.src_row_bytes / 16);
  gp.scales_per_row = static_cast<int>(hidden / kMoeBlock);
  gp.top_k = static_cast<int>(top_k);
  gp.mode = !quantize ? GatherMode::kCopy : (block ? GatherMode::kQuantBlock : GatherMode::kQuantTensor);
  gp.pair_row = reinterpret_cast<const int32_t*>(ws + plan.pair_row);
  gp.tokens = static_cast<int>(tokens);
  if (GroupedGatherByTokens(top_k)) {  // fused_moe.cu skipped the quant kernel for the same predicate
    auto* gather = gp.mode == GatherMode::kCopy          ? &MoeGatherTokensKernel<GatherMode::kCopy>
                   : gp.mode == GatherMode::kQuantTensor ? &MoeGatherTokensKernel<GatherMode::kQuantTensor>
                                                         : &MoeGatherTokensKernel<GatherMode::kQuantBlock>;
    HPC_RETURN_IF_ERROR(Launch("fused_moe gather (tokens) launch", gather, RowGrid(tokens, GatherSegments(gp), sms),
                               dim3(kRowThreads), 0, stream, gp));
    g_gather_by_tokens_launches.fetch_add(1, std::memory_order_relaxed);
  } else {
    auto* gather = gp.mode == GatherMode::kCopy          ? &MoeGatherKernel<GatherMode::kCopy>
                   : gp.mode == GatherMode::kQuantTensor ? &MoeGatherKernel<GatherMode::kQuantTensor>
                                                         : &MoeGatherKernel<GatherMode::kQuantBlock>;
    HPC_RETURN_IF_ERROR(Launch("fused_moe gather launch", gather, RowGrid(plan.max_rows, GatherSegments(gp), sms),
                               dim3(kRowThreads), 0, stream, gp));
  }

  HPC_RETURN_IF_ERROR(LaunchGroupedGemm(groups, gate_up, stream));

  if (!act_in_epilogue) {
    ActParams ap = {};
    ap.gate_up = reinterpret_cast<const __nv_bfloat16*>(ws + plan.gate_up);
    ap.row_count = row_count;
    ap.inter = ws + plan.inter;
    ap.inter_scale = block ? reinterpret_cast<float*>(ws + plan.inter_scale) : nullptr;
    ap.static_scale = tensor ? a.a2_scale.ptr<const float>() : nullptr;
    ap.inter_dim = inter;
    ap.vec_per_row = static_cast<int>(inter / 8);
    ap.quant = a.quant;
    ap.w13_interleaved = a.w13_interleaved;
    HPC_RETURN_IF_ERROR(Launch("fused_moe act launch", MoeActKernel, RowGrid(plan.max_rows, ActSegments(ap), sms),
                               dim3(kRowThreads), 0, stream, ap));
  }

  HPC_RETURN_IF_ERROR(LaunchGroupedGemm(groups, down, stream));

  ReduceParams<__nv_bfloat16> rp = {};
  rp.down = reinterpret_cast<const __nv_bfloat16*>(ws + plan.down);
  rp.weights = a.topk_weights.ptr<const float>();
  rp.pair_row = reinterpret_cast<const int32_t*>(ws + plan.pair_row);
  rp.shared = a.shared_output.present() ? a.shared_output.ptr<const __nv_bfloat16>() : nullptr;
  rp.out = a.out.ptr<__nv_bfloat16>();
  rp.hidden = static_cast<int>(hidden);
  rp.top_k = static_cast<int>(top_k);
  rp.experts = static_cast<int>(experts);  // for ReduceSparse only (rows come from pair_row)
  return LaunchMoeReduce(rp, tokens, GlobalExperts(a), a.x.device_id, stream);
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeGatherByTokensLaunches() { return moe::g_gather_by_tokens_launches.load(std::memory_order_relaxed); }
}  // namespace hpc
