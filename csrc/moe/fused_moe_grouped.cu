// fused_moe's large-T path on sm_90a (M tile 128; the align kernel in fused_moe.cu runs first):
//   setup    (1 CTA)  per-group arguments of both grouped GEMMs from the per-expert counts (grouped_gemm_sm90)
//   gather   rows[r] = x[pair(r) / k], quantized like the reference: fp8_tensor static a13 | fp8_block128 per row
//            per 128 columns (scale = amax/448, fp32 reciprocal multiply) | bf16 copied | fp8 x copied (+ its
//            block scales). Rows are contiguous per expert (sorted order, no padding).
//   GEMM1    rows x w13[e]^T -> gate_up bf16 [rows, 2I] (CUTLASS WGMMA grouped GEMM, fp32 accumulation)
//   act      silu(gate) * up in fp32 -> intermediate (bf16 | e4m3 static a2 | e4m3 per row per 128 + scales)
//   GEMM2    intermediate x w2[e]^T -> down bf16 [rows, H]
//   reduce   y[t] = sum_j (j order) w[t,j] * down[row(t*k+j)] over local experts (+ shared_output), fp32 -> bf16
// Like the tiled path: no host sync, no allocation, launch configuration from shapes (and the SM count) only;
// every kernel waits (PdlWait) for the complete previous one before reading anything. The gather / act grids are
// capped at a full GPU and walk the real rows (header[0], written by align) grid-stride.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

constexpr int kRowThreads = 256;  // gather / act: one 8-column vector per thread, rows flattened
constexpr int kRowCtasPerSm = 6;  // 1536 threads per SM, <= 40 registers each (32 made the gather spill)

// The 8-column vector v of the sorted rows (flattened: vec_per_row vectors per row). The kernels walk the
// vectors of the real rows grid-stride, in steps of whole CTAs, so the loop condition is CTA-uniform and every
// lane of a warp joins the group shuffles; lanes past the rows have valid = false.
struct RowVector {
  int64_t row, col;  // col in elements, a multiple of 8
  bool valid;
};

__device__ __forceinline__ RowVector RowVectorAt(int64_t v, int vec_per_row, int64_t rows) {
  RowVector rv;
  rv.row = v / vec_per_row;
  rv.col = (v - rv.row * vec_per_row) * 8;
  rv.valid = rv.row < rows;
  return rv;
}

// 16 bytes in one load (a plain uint4 dereference of the bf16 x row compiled to four 4-byte loads, seen in SASS):
// x, an input nothing in the op writes, through the read-only path; the previous kernel's output through L2.
__device__ __forceinline__ uint4 LoadInput16(const void* src) { return __ldg(reinterpret_cast<const uint4*>(src)); }
__device__ __forceinline__ uint4 Load16(const void* src) { return __ldcg(reinterpret_cast<const uint4*>(src)); }

// fp8_block128 quantization of 8 columns: each aligned 16-lane group owns one 128-column block of one row
// (columns % 128 == 0), scale = amax / 448 (the tiled path's MoeQuantKernel and the reference, bit for bit).
// Every lane calls it; only valid lanes store.
__device__ __forceinline__ void StoreBlock128(const RowVector& rv, const float (&x)[8], uint8_t* dst,
                                              float* scales, int64_t blocks_per_row) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float scale = GroupMax<16>(amax) / kFp8E4M3Max;
  if (!rv.valid) return;
  if (rv.col % kMoeBlock == 0) scales[rv.row * blocks_per_row + rv.col / kMoeBlock] = scale;
  StoreE4M3x8(dst, x, scale);
}

// ------------------------------------------------------------------------------------------- gather
enum class GatherMode : int32_t { kCopyBf16 = 0, kCopyFp8 = 1, kQuantTensor = 2, kQuantBlock = 3 };

struct GatherParams {
  const uint8_t* x;             // [T, H] bf16 | e4m3
  const float* x_scale;         // e4m3 x with fp8_block128: [T, H/128]
  const float* static_scale;    // kQuantTensor: a13
  const int32_t* sorted_pairs;  // [rows] pair of each row
  const int32_t* row_count;     // local rows (align's header[0])
  uint8_t* rows;                // [P, H] bf16 | e4m3
  float* rows_scale;            // fp8_block128: [P, H/128]
  int64_t hidden;
  int vec_per_row;              // H / 8
  int top_k;
  GatherMode mode;
};

struct GatherVector {
  using Params = GatherParams;
  // fp8_tensor's quantization multiplier, once per thread (it was a load and an IEEE reciprocal per vector)
  static __device__ __forceinline__ float Multiplier(const GatherParams& p) {
    return p.mode == GatherMode::kQuantTensor ? QuantMultiplier(*p.static_scale) : 1.f;
  }
  static __device__ __forceinline__ void Run(const GatherParams& p, const RowVector& rv, float mul);
};

__device__ __forceinline__ void GatherVector::Run(const GatherParams& p, const RowVector& rv, float mul) {
  const int64_t token = rv.valid ? p.sorted_pairs[rv.row] / p.top_k : 0;
  const int64_t src = token * p.hidden + rv.col, dst = rv.row * p.hidden + rv.col;  // elements
  const int64_t kb = p.hidden / kMoeBlock;
  if (p.mode == GatherMode::kQuantBlock) {
    float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (rv.valid) UnpackVec8<__nv_bfloat16>(LoadInput16(p.x + src * 2), x);
    StoreBlock128(rv, x, p.rows + dst, p.rows_scale, kb);
    return;
  }
  if (!rv.valid) return;
  if (p.mode == GatherMode::kCopyBf16) {
    StoreGlobal16(p.rows + dst * 2, LoadInput16(p.x + src * 2));
  } else if (p.mode == GatherMode::kCopyFp8) {
    *reinterpret_cast<uint2*>(p.rows + dst) = *reinterpret_cast<const uint2*>(p.x + src);
    if (p.rows_scale != nullptr && rv.col % kMoeBlock == 0) {
      p.rows_scale[rv.row * kb + rv.col / kMoeBlock] = p.x_scale[token * kb + rv.col / kMoeBlock];
    }
  } else {  // kQuantTensor
    float x[8];
    UnpackVec8<__nv_bfloat16>(LoadInput16(p.x + src * 2), x);
    StoreE4M3x8Scaled(p.rows + dst, x, mul);
  }
}

// -------------------------------------------------------------------------------------------- act
struct ActParams {
  const __nv_bfloat16* gate_up;  // [P, 2I]: gate columns [0, I), up columns [I, 2I)
  const int32_t* row_count;
  uint8_t* inter;                // [P, I] bf16 | e4m3
  float* inter_scale;            // fp8_block128: [P, I/128]
  const float* static_scale;     // fp8_tensor: a2
  int64_t inter_dim;             // I
  int vec_per_row;               // I / 8
  MoeQuant quant;
};

struct ActVector {
  using Params = ActParams;
  static __device__ __forceinline__ float Multiplier(const ActParams& p) {
    return p.quant == MoeQuant::kFp8Tensor ? QuantMultiplier(*p.static_scale) : 1.f;
  }
  static __device__ __forceinline__ void Run(const ActParams& p, const RowVector& rv, float mul);
};

__device__ __forceinline__ void ActVector::Run(const ActParams& p, const RowVector& rv, float mul) {
  float h[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (rv.valid) {
    float gate[8], up[8];
    const __nv_bfloat16* src = p.gate_up + rv.row * 2 * p.inter_dim + rv.col;
    UnpackVec8<__nv_bfloat16>(Load16(src), gate);
    UnpackVec8<__nv_bfloat16>(Load16(src + p.inter_dim), up);
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = __fmul_rn(Silu(gate[i]), up[i]);  // the reference's fp32 h
  }
  const int64_t dst = rv.row * p.inter_dim + rv.col;
  if (p.quant == MoeQuant::kFp8Block128) {  // I % 128 == 0
    StoreBlock128(rv, h, p.inter + dst, p.inter_scale, p.inter_dim / kMoeBlock);
  } else if (rv.valid) {
    if (p.quant == MoeQuant::kNone) {
      StoreVec8(reinterpret_cast<__nv_bfloat16*>(p.inter) + dst, h);
    } else {
      StoreE4M3x8Scaled(p.inter + dst, h, mul);
    }
  }
}

// The gather and act kernels: Op::Run on every 8-column vector of the real rows, grid-stride in whole CTAs.
template <class Op>
__global__ void __launch_bounds__(kRowThreads, kRowCtasPerSm)
    MoeRowsKernel(const __grid_constant__ typename Op::Params p) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t rows = *p.row_count, vectors = rows * p.vec_per_row;
  const float mul = Op::Multiplier(p);
  for (int64_t v0 = static_cast<int64_t>(blockIdx.x) * kRowThreads; v0 < vectors;
       v0 += static_cast<int64_t>(gridDim.x) * kRowThreads) {
    Op::Run(p, RowVectorAt(v0 + threadIdx.x, p.vec_per_row, rows), mul);
  }
}

// Grid of the gather / act kernels: enough CTAs for the most rows, at most kRowCtasPerSm per SM; they walk the
// real rows grid-stride, so an EP rank with few local rows launches no flood of CTAs that find nothing to do.
// A function of the shapes and the device only.
dim3 RowGrid(int64_t max_rows, int64_t vec_per_row, int sms) {
  const int64_t need = (max_rows * vec_per_row + kRowThreads - 1) / kRowThreads;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(need, int64_t{sms} * kRowCtasPerSm))));
}

}  // namespace

Status RunGroupedMoe(const FusedMoeArgs& a, const MoePlan& plan, cudaStream_t stream) {
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
  const GroupedGemmProblem gate_up = problem(plan.rows, plan.rows_scale, a.a13_scale, a.w13, a.w13_scale, plan.gate_up,
                                             2 * inter, hidden, plan.gemm_args);
  const GroupedGemmProblem down = problem(plan.inter, plan.inter_scale, a.a2_scale, a.w2, a.w2_scale, plan.down, hidden,
                                          inter, plan.gemm_args + experts * kGroupedGemmArgsBytesPerExpert);

  HPC_RETURN_IF_ERROR(LaunchGroupedGemmSetup(groups, gate_up, down, stream));

  GatherParams gp = {};
  gp.x = static_cast<const uint8_t*>(a.x.data);
  gp.x_scale = block && a.x.dtype == DType::kF8E4M3 ? a.x_scale.ptr<const float>() : nullptr;
  gp.static_scale = tensor ? a.a13_scale.ptr<const float>() : nullptr;
  gp.sorted_pairs = reinterpret_cast<const int32_t*>(ws + plan.sorted_pairs);
  gp.row_count = row_count;
  gp.rows = ws + plan.rows;
  gp.rows_scale = block ? reinterpret_cast<float*>(ws + plan.rows_scale) : nullptr;
  gp.hidden = hidden;
  gp.vec_per_row = static_cast<int>(hidden / 8);
  gp.top_k = static_cast<int>(top_k);
  gp.mode = a.x.dtype == DType::kF8E4M3 ? GatherMode::kCopyFp8
            : !fp8                      ? GatherMode::kCopyBf16
            : block                     ? GatherMode::kQuantBlock
                                        : GatherMode::kQuantTensor;
  HPC_RETURN_IF_ERROR(Launch("fused_moe gather launch", MoeRowsKernel<GatherVector>,
                             RowGrid(plan.max_rows, gp.vec_per_row, sms), dim3(kRowThreads), 0, stream, gp));

  HPC_RETURN_IF_ERROR(LaunchGroupedGemm(groups, gate_up, stream));

  ActParams ap = {};
  ap.gate_up = reinterpret_cast<const __nv_bfloat16*>(ws + plan.gate_up);
  ap.row_count = row_count;
  ap.inter = ws + plan.inter;
  ap.inter_scale = block ? reinterpret_cast<float*>(ws + plan.inter_scale) : nullptr;
  ap.static_scale = tensor ? a.a2_scale.ptr<const float>() : nullptr;
  ap.inter_dim = inter;
  ap.vec_per_row = static_cast<int>(inter / 8);
  ap.quant = a.quant;
  HPC_RETURN_IF_ERROR(Launch("fused_moe act launch", MoeRowsKernel<ActVector>,
                             RowGrid(plan.max_rows, ap.vec_per_row, sms), dim3(kRowThreads), 0, stream, ap));

  HPC_RETURN_IF_ERROR(LaunchGroupedGemm(groups, down, stream));

  ReduceParams<__nv_bfloat16> rp = {};
  rp.down = reinterpret_cast<const __nv_bfloat16*>(ws + plan.down);
  rp.weights = a.topk_weights.ptr<const float>();
  rp.pair_row = reinterpret_cast<const int32_t*>(ws + plan.pair_row);
  rp.shared = a.shared_output.present() ? a.shared_output.ptr<const __nv_bfloat16>() : nullptr;
  rp.out = a.out.ptr<__nv_bfloat16>();
  rp.hidden = static_cast<int>(hidden);
  rp.top_k = static_cast<int>(top_k);
  return LaunchMoeReduce(rp, tokens, stream);
}

}  // namespace hpc::moe
