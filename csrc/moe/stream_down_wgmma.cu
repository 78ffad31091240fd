// fused_moe stream path, down on wgmma for one token (stream_down_wgmma.h).
//
// Why: at T = 1 the mma.sync down kernel (fused_moe_stream.cu) takes ~4.5-4.7 us for Qwen3-30B fp8's 12.6 MB of w2
// whether the bytes come from HBM or from L2 (experiment 43's timeline, H200): it is bound by its own per-byte work
// (e4m3 -> f16 conversions for mma.sync, one CTA per SM walking a ring), not by memory. Here a CTA's whole job is
// one-shot, as in the wgmma gate-up: copy its 64 weight rows in (issued BEFORE the PDL wait -- the weights are
// inputs, so the copies run while the gate-up drains), multiply by the token's intermediate row, reduce across the
// top_k slots, write. (Session 13's wgmma down was another design -- clusters splitting K, a serial ring of 24
// groups per CTA -- and ran at 0.8 TB/s.)
//
// Work: a cluster of top_k CTAs per 64 rows of H; CTA j (the cluster rank) takes slot j: A = rows [h0, h0 + 64) of
// w2[e_j] (64 x I, the wgmma M), B = inter[j, :] as token row 0 of an n8 tile (rows 1-7 zero). All of K (I <= 1024:
// <= 8 groups of 128, 8 KB each) is copied in at once. Slots of other ranks' experts copy and multiply nothing.
// The other ranks' tiles go to rank 0 through distributed shared memory; rank 0 adds the slots in j order with the
// same operations as the mma.sync kernel's sum -- y = sum_j w_j * (v_j * a2_scale * w2_scale[e_j]) (+ shared) --
// so the result is bitwise deterministic.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <atomic>

#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/moe_trace.cuh"
#include "csrc/moe/moe_common.cuh"
#include "csrc/moe/stream_down_wgmma.h"
#include "csrc/moe/wgmma_sm90.cuh"

namespace hpc::moe {
namespace {

namespace cg = cooperative_groups;

// Launches of this kernel (FusedMoeWgmmaDownLaunches: the tests' proof of which kernel ran).
std::atomic<int64_t> g_launches{0};

constexpr int kThreads = 128;                     // one warpgroup
constexpr int kRows = 64;                         // rows of H per CTA: the wgmma M
constexpr int kGroupK = 128;                      // K per group: one 128-byte swizzle atom row of e4m3
constexpr int kMaxGroups = 8;                     // I <= 1024
constexpr int kMaxSlots = 8;                      // top_k: the cluster, at most the portable size
constexpr int kAGroupBytes = kRows * kGroupK;     // 8 KB
constexpr int kBGroupBytes = 8 * kGroupK;         // 1 KB: the n8 tile, token row 0
static_assert(kMaxGroups <= 8, "CpAsyncWaitAtMost");

__device__ __forceinline__ void ClusterArriveRelaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n"); }
__device__ __forceinline__ void ClusterWait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

__global__ void __launch_bounds__(kThreads) DownWgmmaKernel(const __grid_constant__ WgmmaDownArgs a) {
  extern __shared__ uint8_t dyn[];
  __shared__ float4 red[kMaxSlots - 1][kThreads];  // rank 0: the other slots' tiles
  __shared__ float slot_w[kMaxSlots], slot_ts[kMaxSlots];
  __shared__ int slot_local[kMaxSlots];
  const int tid = threadIdx.x, lane = tid % 32;
  const int slot = static_cast<int>(blockIdx.x) % a.top_k;
  const int h0 = static_cast<int>(blockIdx.x) / a.top_k * kRows;
  const int64_t H = a.hidden, I = a.inter_size;
  const int groups = static_cast<int>((I + kGroupK - 1) / kGroupK);
  const bool clustered = a.top_k > 1;
  HPC_MOE_TRACE_TIME(0);
  // Rank 0 must have started before the others write its shared memory: arrive now, wait before those writes.
  if (clustered) ClusterArriveRelaxed();

  // 1024-byte aligned operand tiles (the swizzle is a function of the address bits).
  const uint32_t raw = SmemAddr(dyn);
  const uint32_t a_base = (raw + 1023u) & ~1023u;
  const uint32_t b_base = a_base + groups * kAGroupBytes;
  uint8_t* b_ptr = dyn + (b_base - raw);

  // Before the PDL wait: ids, weights and scales are inputs of the op, complete once the gate-up kernel (past its
  // own wait) has started us, and so is w2 -- the slot's weight rows are copied in while the gate-up drains.
  const int e = a.ids[slot] - a.expert_offset;
  const bool local = e >= 0 && e < a.experts;
  if (local) {
    // 512 chunks of 16 bytes per group, 4 per thread; a thread's rows share r % 8, so its chunks keep one swizzle.
    const uint8_t* rows = a.w2 + (static_cast<int64_t>(e) * H + h0) * I;
    const int r0 = tid / 8, c = tid % 8;
#pragma unroll
    for (int s = 0; s < kMaxGroups; ++s) {
      if (s < groups) {
        const int64_t k = static_cast<int64_t>(s) * kGroupK + c * 16;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 16 * i;
          CpAsync16(a_base + s * kAGroupBytes + Sw128(r, c), k < I ? rows + r * I + k : rows, k < I);
        }
      }
      CpAsyncCommit();
    }
  }
  // The final sum's per-slot factors (rank 0 uses them; loaded here, off the sum's chain of dependent loads).
  if (tid < a.top_k) {
    const int ej = a.ids[tid] - a.expert_offset;
    const bool lj = ej >= 0 && ej < a.experts;
    slot_local[tid] = lj;
    slot_w[tid] = a.weights[tid];
    slot_ts[tid] = lj ? __fmul_rn(*a.a2_scale, a.w2_scale[ej]) : 0.f;
  }
  HPC_MOE_TRACE_TIME(1);  // copies issued, slot factors loaded
  HPC_MOE_TRACE_VALUE(6, local ? e + 1 : 0);
  PdlWait();  // the intermediate comes from the gate-up kernel
  HPC_MOE_TRACE_TIME(2);
  PdlLaunchDependents();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (local) {
    // B: token row 0 = inter[slot, :] (zero past I), rows 1-7 zero; written before the first group's barrier.
    for (int i = tid; i < groups * 64; i += kThreads) {
      const int s = i / 64, t = (i / 8) % 8, ch = i % 8;
      const int64_t k = static_cast<int64_t>(s) * kGroupK + ch * 16;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (t == 0 && k < I) v = __ldcg(reinterpret_cast<const uint4*>(a.inter + slot * I + k));
      *reinterpret_cast<uint4*>(b_ptr + s * kBGroupBytes + Sw128(t, ch)) = v;
    }
    // Per K group: wait for its copies (group s has landed when at most kMaxGroups - 1 - s are pending), 4 wgmmas.
#pragma unroll
    for (int s = 0; s < kMaxGroups; ++s) {
      if (s < groups) {
        CpAsyncWaitAtMost(kMaxGroups - 1 - s);
        FenceProxyAsync();
        __syncthreads();
        WgmmaGroupE4M3(acc, a_base + s * kAGroupBytes, b_base + s * kBGroupBytes);
      }
    }
  }
  HPC_MOE_TRACE_TIME(3);  // this slot's MMAs done
  HPC_MOE_TRACE_VALUE(7, ::hpc::moe::trace::SmId());
  if (clustered) {
    ClusterWait();
    if (slot > 0) {
      if (local) *cg::this_cluster().map_shared_rank(&red[slot - 1][tid], 0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      cg::this_cluster().sync();  // the tile is in rank 0 (it reads after this barrier)
      HPC_MOE_TRACE_TIME(5);
      return;
    }
    cg::this_cluster().sync();
  } else {
    __syncthreads();  // slot factors
  }
  // Rank 0: the token is column 0 of the n8 tile, held by lanes q == 0 -- d[0] row 16w + g, d[2] row 16w + g + 8.
  const int w = tid / 32, g = lane / 4, q = lane % 4;
  if (q != 0) return;
  float y0 = 0.f, y1 = 0.f;
  for (int j = 0; j < a.top_k; ++j) {
    if (!slot_local[j]) continue;  // another rank's expert: contributes 0
    const float4 v = j == 0 ? make_float4(acc[0], acc[1], acc[2], acc[3]) : red[j - 1][tid];
    const float ts = slot_ts[j], wj = slot_w[j];
    y0 = __fadd_rn(y0, __fmul_rn(wj, __fmul_rn(v.x, ts)));
    y1 = __fadd_rn(y1, __fmul_rn(wj, __fmul_rn(v.z, ts)));
  }
  const int r = h0 + 16 * w + g;
  if (a.shared != nullptr) {
    y0 = __fadd_rn(y0, __bfloat162float(a.shared[r]));
    y1 = __fadd_rn(y1, __bfloat162float(a.shared[r + 8]));
  }
  a.out[r] = __float2bfloat16_rn(y0);
  a.out[r + 8] = __float2bfloat16_rn(y1);
  HPC_MOE_TRACE_TIME(5);  // thread 0 is a q == 0 lane
}

}  // namespace

bool StreamDownWgmmaFits(int tokens, int top_k, int hidden, int inter_size) {
  return tokens == 1 && top_k >= 1 && top_k <= kMaxSlots && hidden % kRows == 0 && inter_size % 16 == 0 &&
         inter_size <= kGroupK * kMaxGroups;
}

Status LaunchStreamDownWgmma(const WgmmaDownArgs& a, cudaStream_t stream) {
  const int groups = (a.inter_size + kGroupK - 1) / kGroupK;
  // operands + 1 KB for the 1024-byte alignment
  const int smem = groups * (kAGroupBytes + kBGroupBytes) + 1024;
  // AllowSmem raises the limit once per kernel: give it the largest size any shape asks for
  constexpr int kMaxSmem = kMaxGroups * (kAGroupBytes + kBGroupBytes) + 1024;
  HPC_RETURN_IF_ERROR(AllowSmem(reinterpret_cast<const void*>(&DownWgmmaKernel), kMaxSmem));
  const unsigned ctas = static_cast<unsigned>(a.hidden / kRows * a.top_k);
  HPC_RETURN_IF_ERROR(LaunchCluster("fused_moe stream down (wgmma) launch", &DownWgmmaKernel, dim3(ctas),
                                    dim3(kThreads), smem, static_cast<unsigned>(a.top_k), stream, a));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace hpc::moe

namespace hpc {
int64_t FusedMoeWgmmaDownLaunches() { return moe::g_launches.load(std::memory_order_relaxed); }
#ifdef HPC_MOE_TRACE
Status FusedMoeTraceDownWgmma(bool reset, std::vector<uint64_t>* out) { return moe::trace::Access(reset, out); }
#endif
}  // namespace hpc
