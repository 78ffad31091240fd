// fused_moe on sm_90a, version 2: three kernels chained with PDL (Launch() + PdlWait()), no host sync, no
// allocation, launch configuration from shapes only (CUDA-graph / XLA command-buffer safe):
//   1. prep      CTA 0: align (counting pass over topk_ids -> tile list + pairs sorted by expert, stable by pair
//                index). CTAs 1..: x -> e4m3 (fp8 with bf16 x: static a13 | per token per 128 columns), the
//                local pair count of each token, zeroed arrival counters, and (small T) bulk L2 prefetches of
//                the hit experts' gate-up weights (fused_moe_plan.h GateUpPrefetchPerHalf).
//   2. gate-up   grouped GEMM (moe_gemm.cuh): gathered x rows x w13[e] gate and up -> silu(gate)*up -> the
//                intermediate (bf16 | e4m3 + scales), rows in sorted order; split-K over gridDim.z at small T
//   3. down      grouped GEMM: intermediate x w2[e] -> fp32 down row of each pair, then (fused) the weighted
//                reduce y[t] = sum_j (j order) w[t,j] * down[t*k+j] (+ shared_output) -> bf16, done by the CTA
//                that writes a token's last local row in an N block; one extra CTA row writes tokens without
//                local pairs. Its weight loads start before it waits for gate-up.
// v1 had five kernels (align, quant, gate-up, down, reduce): two kernel boundaries fewer, same results bit for bit
// except where split-K changes the K summation order (deterministic: pieces summed in piece order).
// Workspace layout, the M tile, split-K: fused_moe_plan.h. The GEMM grids are (max_tiles, N / BN[, pieces]); CTAs
// past the real tile count exit at once. Every kernel waits (PdlWait) for the complete previous kernel before it
// reads anything the previous kernel writes, transitively for all earlier ones (and the previous op on the stream).
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/vec.cuh"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"
#include "csrc/moe/moe_gemm.cuh"

namespace hpc {
namespace {

using moe::GemmKind;
using moe::GemmParams;
using moe::GemmShape;

// ----------------------------------------------------------------------------------------------- 1. prep
constexpr int kPrepThreads = 1024;
constexpr int kAlignWarps = kPrepThreads / 32;

struct PrepParams {
  // align (CTA 0)
  const int32_t* ids;  // [T*k]
  int32_t* header;     // [0] = tiles
  int32_t* tile_expert;
  int32_t* sorted_pairs;
  int pairs, experts, expert_offset, tile_m, top_k;
  int64_t tokens;
  // work CTAs (1..)
  const __nv_bfloat16* x;     // quant (xq != nullptr): bf16 x
  uint8_t* xq;
  float* xq_scale;            // block128: [T, H/128]
  const float* static_scale;  // fp8_tensor: a13
  int64_t vectors;            // T * H / 8
  bool block;
  int32_t* token_local;       // [T]
  uint4* sync;                // arrival counters, zeroed
  int64_t sync_vec4;
  const uint8_t* w13;         // L2 prefetch (prefetch_half > 0)
  int64_t w13_expert_bytes, w13_half_bytes, prefetch_half;
};

__device__ __forceinline__ bool LocalExpert(int id, int offset, int experts, int* e) {
  *e = id - offset;
  return *e >= 0 && *e < experts;
}

// Each warp owns a contiguous segment of pairs. Pass 1 counts per (warp, expert) in shared memory; those counts
// become per-(warp, expert) cursors at base(expert) + pairs of earlier warps; pass 2 walks each segment in order,
// 32 pairs at a time, ranking equal experts inside the 32 with match_any: a stable order by pair index.
__device__ __forceinline__ void AlignCta(const PrepParams& p, int32_t* cursor) {
  using BlockScan = cub::BlockScan<int32_t, kPrepThreads>;
  __shared__ typename BlockScan::TempStorage scan;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < kAlignWarps * p.experts; i += kPrepThreads) cursor[i] = 0;
  __syncthreads();
  const int seg = (p.pairs + kAlignWarps - 1) / kAlignWarps;
  const int begin = min(p.pairs, warp * seg), end = min(p.pairs, begin + seg);
  for (int i = begin + lane; i < end; i += 32) {
    int e;
    if (LocalExpert(p.ids[i], p.expert_offset, p.experts, &e)) atomicAdd(&cursor[warp * p.experts + e], 1);
  }
  __syncthreads();
  // one expert per thread (experts <= 1024): total and per-warp exclusive prefix
  int count = 0;
  if (tid < p.experts) {
    for (int w = 0; w < kAlignWarps; ++w) {
      const int c = cursor[w * p.experts + tid];
      cursor[w * p.experts + tid] = count;
      count += c;
    }
  }
  const int tiles = (count + p.tile_m - 1) / p.tile_m;
  int first_tile, total_tiles;
  BlockScan(scan).ExclusiveSum(tiles, first_tile, total_tiles);
  if (tid == 0) p.header[0] = total_tiles;
  if (tid < p.experts) {
    const int base = first_tile * p.tile_m;
    for (int t = 0; t < tiles; ++t) p.tile_expert[first_tile + t] = tid;
    for (int r = base + count; r < base + tiles * p.tile_m; ++r) p.sorted_pairs[r] = -1;  // padding
    for (int w = 0; w < kAlignWarps; ++w) cursor[w * p.experts + tid] += base;
  }
  __syncthreads();
  for (int i0 = begin; i0 < end; i0 += 32) {
    const int i = i0 + lane;
    int e = -1;
    if (i >= end || !LocalExpert(p.ids[i], p.expert_offset, p.experts, &e)) e = -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(same & ((1u << lane) - 1u));
    int* cur = e >= 0 ? &cursor[warp * p.experts + e] : nullptr;
    const int pos = e >= 0 ? *cur + rank : 0;
    __syncwarp();
    if (e >= 0) {
      p.sorted_pairs[pos] = i;
      if (rank == 0) *cur += __popc(same);
    }
    __syncwarp();
  }
}

// Groups of 16 lanes own 128 consecutive columns of one token (8 per lane): exactly one block128 block. The loop
// base is warp-uniform (full-mask shuffles); vectors is a multiple of 16 for block128, so a group is all valid or
// all not.
__device__ __forceinline__ void QuantX(const PrepParams& p, int64_t gtid, int64_t threads) {
  const int lane = threadIdx.x % 32;
  for (int64_t base = gtid - lane; base < p.vectors; base += threads) {
    const int64_t v = base + lane;
    const bool valid = v < p.vectors;
    float x[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (valid) LoadVec8(p.x + v * 8, x);
    float scale;
    if (p.block) {
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
      amax = GroupMax<16>(amax);
      scale = amax / kFp8E4M3Max;
      if (valid && lane % 16 == 0) p.xq_scale[v / 16] = scale;  // (token, block) = (v*8) / 128 in [T, H/128]
    } else {
      scale = *p.static_scale;
    }
    if (valid) StoreE4M3x8(p.xq + v * 8, x, scale);
  }
}

__device__ __forceinline__ void PrefetchL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

__global__ void __launch_bounds__(kPrepThreads) MoePrepKernel(const __grid_constant__ PrepParams p) {
  extern __shared__ int32_t cursor[];  // CTA 0: [kAlignWarps][experts]
  PdlWait();
  PdlLaunchDependents();
  if (blockIdx.x == 0) {
    AlignCta(p, cursor);
    return;
  }
  const int64_t ctas = gridDim.x - 1, cta = blockIdx.x - 1;
  const int64_t threads = ctas * kPrepThreads, gtid = cta * kPrepThreads + threadIdx.x;
  if (p.prefetch_half > 0) {
    // chunk c = (pair, half, offset); chunk c is issued by CTA c % ctas, so every SM's TMA unit takes a share.
    // In bounds: offset + chunk <= prefetch_half <= half_bytes, and only local experts e in [0, E).
    const int64_t per_half = p.prefetch_half / moe::kMoePrefetchChunk, chunks = int64_t{p.pairs} * 2 * per_half;
    for (int64_t c = cta + ctas * threadIdx.x; c < chunks; c += threads) {
      const int64_t pair = c / (2 * per_half), rem = c % (2 * per_half);
      int e;
      if (!LocalExpert(p.ids[pair], p.expert_offset, p.experts, &e)) continue;
      PrefetchL2(p.w13 + e * p.w13_expert_bytes + (rem / per_half) * p.w13_half_bytes +
                     (rem % per_half) * moe::kMoePrefetchChunk,
                 static_cast<uint32_t>(moe::kMoePrefetchChunk));
    }
  }
  if (p.xq != nullptr) QuantX(p, gtid, threads);
  for (int64_t t = gtid; t < p.tokens; t += threads) {
    int local = 0, e;
    for (int j = 0; j < p.top_k; ++j) local += LocalExpert(p.ids[t * p.top_k + j], p.expert_offset, p.experts, &e);
    p.token_local[t] = local;
  }
  for (int64_t i = gtid; i < p.sync_vec4; i += threads) p.sync[i] = make_uint4(0u, 0u, 0u, 0u);
}

// ------------------------------------------------------------------------------------------- launcher
// Raises a kernel's dynamic shared-memory limit and asks for the largest shared-memory carveout, once per kernel
// (never on the hot path after the first call). The same carveout for all three kernels lets a PDL-launched CTA
// of the next kernel share an SM with the running one (two 108 KB GEMM CTAs need 218 KB of the SM's 228 KB).
Status AllowSmem(const void* fn, int bytes) {
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(fn)) return Status::Ok();
  HPC_RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                                 "fused_moe: shared memory attribute"));
  HPC_RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                      static_cast<int>(cudaSharedmemCarveoutMaxShared)),
                                 "fused_moe: shared memory carveout"));
  done.insert(fn);
  return Status::Ok();
}

// gate-up grid (max_tiles, up_blocks, splits); down grid (max_tiles + 1, down_blocks): the last x row writes the
// tokens without local pairs.
template <GemmKind KIND, MoeQuant Q, int BM>
Status LaunchGemm(const GemmParams& gp, const moe::MoePlan& plan, cudaStream_t stream) {
  using S = GemmShape<KIND, Q, BM>;
  auto* fn = &moe::MoeGemmKernel<KIND, Q, BM>;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(fn), S::kSmemBytes));
  const bool up = KIND == GemmKind::kGateUp;
  const int64_t blocks = up ? plan.up_blocks : plan.down_blocks;
  if ((gp.n + S::kBN - 1) / S::kBN != blocks) return Status::Internal("fused_moe: N blocks disagree with the plan");
  const dim3 grid(static_cast<unsigned>(up ? plan.max_tiles : plan.max_tiles + 1), static_cast<unsigned>(blocks),
                  static_cast<unsigned>(up ? plan.splits : 1));
  return Launch(up ? "fused_moe gate-up GEMM launch" : "fused_moe down GEMM launch", fn, grid,
                dim3(moe::kGemmThreads), S::kSmemBytes, stream, gp);
}

template <MoeQuant Q, int BM>
Status LaunchGemms(const GemmParams& up, const GemmParams& down, const moe::MoePlan& plan, cudaStream_t stream) {
  if (plan.max_tiles > 0) HPC_RETURN_IF_ERROR((LaunchGemm<GemmKind::kGateUp, Q, BM>(up, plan, stream)));
  return LaunchGemm<GemmKind::kDown, Q, BM>(down, plan, stream);  // always: it writes y
}

template <MoeQuant Q>
Status DispatchTile(const GemmParams& up, const GemmParams& down, const moe::MoePlan& plan, cudaStream_t s) {
  switch (plan.tile_m) {
    case 16: return LaunchGemms<Q, 16>(up, down, plan, s);
    case 32: return LaunchGemms<Q, 32>(up, down, plan, s);
    case 64: return LaunchGemms<Q, 64>(up, down, plan, s);
    default: return Status::Internal("fused_moe: no kernel for M tile " + std::to_string(plan.tile_m));
  }
}

// HPC_XLA_CHECK=1: the ids must be in [0, num_experts_global) (copies them to the host; syncs).
Status CheckIdsOnDevice(const FusedMoeArgs& a, int64_t global, cudaStream_t stream) {
  const int64_t n = a.topk_ids.numel(), top_k = a.topk_ids.shape[1];
  std::vector<int32_t> ids(n);
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(ids.data(), a.topk_ids.data, n * 4, cudaMemcpyDeviceToHost, stream),
                                 "fused_moe: HPC_XLA_CHECK copy"));
  HPC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "fused_moe: HPC_XLA_CHECK sync"));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= global) {
      return ArgCheck("fused_moe").Fail("topk_ids[" + std::to_string(i / top_k) + ", " + std::to_string(i % top_k) +
                                        "] = " + std::to_string(ids[i]) + " is outside [0, num_experts_global=" +
                                        std::to_string(global) + ") (HPC_XLA_CHECK)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status FusedMoeCuda(const FusedMoeArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateFusedMoeCuda(a));
  if (a.x.device != DeviceKind::kCuda) return Status::Internal("fused_moe: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.x.device_id));
  const int64_t tokens = a.x.shape[0], hidden = a.x.shape[1], experts = a.w13.shape[0], inter = a.w13.shape[1] / 2;
  const int64_t top_k = a.topk_ids.shape[1];
  if (tokens == 0) return Status::Ok();
  const int64_t global = a.num_experts_global > 0 ? a.num_experts_global : experts + a.expert_offset;
  if (DeviceChecksEnabled()) HPC_RETURN_IF_ERROR(CheckIdsOnDevice(a, global, stream));
  const moe::MoePlan plan = moe::MakeMoePlan(tokens, top_k, experts, hidden, inter, a.quant);
  uint8_t* ws = a.workspace.ptr<uint8_t>();
  int32_t* header = reinterpret_cast<int32_t*>(ws + plan.header);
  int32_t* tile_expert = reinterpret_cast<int32_t*>(ws + plan.tile_expert);
  int32_t* sorted_pairs = reinterpret_cast<int32_t*>(ws + plan.sorted_pairs);
  int32_t* token_local = reinterpret_cast<int32_t*>(ws + plan.token_local);
  const bool fp8 = a.quant != MoeQuant::kNone, block = a.quant == MoeQuant::kFp8Block128;
  const int elem = fp8 ? 1 : 2;

  // 1. prep: align (CTA 0) + quant, token_local, zeroed counters, L2 prefetch (CTAs 1..)
  const bool quant_x = fp8 && a.x.dtype == DType::kBF16;
  PrepParams pp = {};
  pp.ids = a.topk_ids.ptr<const int32_t>();
  pp.header = header;
  pp.tile_expert = tile_expert;
  pp.sorted_pairs = sorted_pairs;
  pp.pairs = static_cast<int>(plan.pairs);
  pp.experts = static_cast<int>(experts);
  pp.expert_offset = static_cast<int>(a.expert_offset);
  pp.tile_m = plan.tile_m;
  pp.top_k = static_cast<int>(top_k);
  pp.tokens = tokens;
  if (quant_x) {
    pp.x = a.x.ptr<const __nv_bfloat16>();
    pp.xq = ws + plan.x_q;
    pp.xq_scale = block ? reinterpret_cast<float*>(ws + plan.x_q_scale) : nullptr;
    pp.static_scale = block ? nullptr : a.a13_scale.ptr<const float>();
    pp.vectors = tokens * hidden / 8;
    pp.block = block;
  }
  pp.token_local = token_local;
  pp.sync = reinterpret_cast<uint4*>(ws + plan.sync);
  pp.sync_vec4 = plan.sync_bytes / 16;
  pp.w13 = static_cast<const uint8_t*>(a.w13.data);
  pp.w13_half_bytes = inter * hidden * elem;
  pp.w13_expert_bytes = 2 * pp.w13_half_bytes;
  pp.prefetch_half = plan.max_tiles > 0 ? moe::GateUpPrefetchPerHalf(plan.pairs, pp.w13_half_bytes) : 0;
  // work CTAs: one quant vector, one token and 4 counter vectors per thread at least; kMoePrefetchCtas to prefetch
  auto ceil_div = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
  const int64_t work_ctas =
      std::max<int64_t>({int64_t{1}, ceil_div(pp.vectors, kPrepThreads), ceil_div(tokens, kPrepThreads),
                         ceil_div(pp.sync_vec4, 4 * kPrepThreads), pp.prefetch_half > 0 ? moe::kMoePrefetchCtas : 0});
  const int align_smem = static_cast<int>(kAlignWarps * experts * 4);
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(&MoePrepKernel), kAlignWarps * kMaxMoeCudaExperts * 4));
  HPC_RETURN_IF_ERROR(Launch("fused_moe prep launch", MoePrepKernel, dim3(static_cast<unsigned>(1 + work_ctas)),
                             dim3(kPrepThreads), align_smem, stream, pp));
  const uint8_t* a_x = quant_x ? pp.xq : static_cast<const uint8_t*>(a.x.data);
  const float* a_x_scale = quant_x ? pp.xq_scale : (block ? a.x_scale.ptr<const float>() : nullptr);

  // 2./3. grouped GEMMs (+ the fused reduce)
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
  up.experts = static_cast<int>(experts);
  up.partials = plan.splits > 1 ? reinterpret_cast<float*>(ws + plan.partials) : nullptr;
  up.split_count = plan.splits > 1 ? reinterpret_cast<int32_t*>(ws + plan.split_count(tokens)) : nullptr;

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
  down.partials = nullptr;
  down.split_count = nullptr;
  down.weights = a.topk_weights.ptr<const float>();
  down.ids = a.topk_ids.ptr<const int32_t>();
  down.token_local = token_local;
  down.reduce_count = reinterpret_cast<int32_t*>(ws + plan.reduce_count());
  down.shared = a.shared_output.present() ? a.shared_output.ptr<const __nv_bfloat16>() : nullptr;
  down.y = a.out.ptr<__nv_bfloat16>();
  down.tokens = static_cast<int>(tokens);
  down.experts = static_cast<int>(experts);
  down.expert_offset = static_cast<int>(a.expert_offset);

  switch (a.quant) {
    case MoeQuant::kNone: return DispatchTile<MoeQuant::kNone>(up, down, plan, stream);
    case MoeQuant::kFp8Tensor: return DispatchTile<MoeQuant::kFp8Tensor>(up, down, plan, stream);
    default: return DispatchTile<MoeQuant::kFp8Block128>(up, down, plan, stream);
  }
}

}  // namespace hpc
