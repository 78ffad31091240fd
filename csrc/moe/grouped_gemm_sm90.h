// Grouped GEMMs of fused_moe's large-T path on sm_90a, built on CUTLASS 3.x/4.x warp-specialized persistent
// kernels (TMA + WGMMA: QGMMA for fp8, HGMMA for bf16). One grouped GEMM computes, for every local expert e,
//   D[rows_e, N] (bf16) = alpha_e * A[rows_e, K] x B[e]^T        (fp8_block128: per 128-block scales instead)
// where rows_e are the expert's sorted rows (contiguous, first row expert_first[e], expert_count[e] of them:
// no padding, a group with 0 rows is skipped) and B[e] = w[e] is [N, K] K-major (w13 [E, 2I, H] | w2 [E, H, I],
// i.e. CUTLASS's "TN" layout). Every argument the kernel reads per group (problem sizes, pointers, strides,
// alphas, scale layouts) is written ON THE GPU by a setup kernel from the align kernel's per-expert counts, so
// nothing here syncs, allocates or depends on the data: CUDA-graph / XLA command-buffer safe.
// Framework-free: views in, Status out (this header does not include CUTLASS).
#pragma once

#include <cstdint>

#include "csrc/common/status.h"
#include "csrc/moe/fused_moe.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc::moe {

// Device bytes of the per-group argument arrays of ONE grouped GEMM, per local expert (problem size, A/B/D
// pointers and strides, alpha, scale pointers and layouts; checked against the real sizes with static_assert).
constexpr int64_t kGroupedGemmArgsBytesPerExpert = 512;
// CUTLASS's own workspace (TMA descriptors per SM and tensor: 4 x 128 B per SM), bounded for up to
// kGroupedGemmMaxSms SMs so the workspace stays a pure function of the shapes (checked at run time).
constexpr int kGroupedGemmMaxSms = 256;
constexpr int64_t kGroupedGemmWorkspaceBytes = int64_t{1024} * kGroupedGemmMaxSms;

// One grouped GEMM over the local experts.
struct GroupedGemmProblem {
  const void* a = nullptr;           // [rows, K] e4m3 | bf16, rows sorted by expert
  const float* a_scale = nullptr;    // fp8_block128: [rows, K/128] f32 (row-major: K-major scale factors)
  const float* a_tensor_scale = nullptr;  // fp8_tensor: the A operand's static scale (f32 scalar)
  const void* b = nullptr;           // [E, N, K] e4m3 | bf16
  const float* b_scale = nullptr;    // fp8_tensor: [E]; fp8_block128: [E, N/128, K/128]
  void* d = nullptr;                 // [rows, N] bf16
  int64_t n = 0, k = 0;
  void* args = nullptr;              // device scratch, kGroupedGemmArgsBytesPerExpert * E bytes, 256-aligned
  // Gate-up with the activation in its epilogue (GroupedGemmActInEpilogue; moe_act_epilogue_sm90.h): b is w13
  // interleaved in blocks of 64 rows (gate 64, up 64, ...) and the epilogue writes silu(gate) * up straight into
  // d = the intermediate [rows, N / 2] (e4m3 with act_scale = a2 | bf16) instead of gate_up [rows, N] bf16.
  bool act_epilogue = false;
  const float* act_scale = nullptr;
};

// What both grouped GEMMs of one layer share.
struct GroupedGemmGroups {
  MoeQuant quant = MoeQuant::kNone;
  int experts = 0;                        // local experts E (groups), <= kMaxMoeCudaExperts
  const int32_t* expert_count = nullptr;  // [E] rows per expert (device, from the align kernel)
  const int32_t* expert_first = nullptr;  // [E] first sorted row of each expert
  void* workspace = nullptr;              // kGroupedGemmWorkspaceBytes, 256-aligned (shared: the GEMMs run in turn)
  int tile_m = 128;                       // CTA tile rows: 128 (cooperative) | 64 (ping-pong): GroupedCtaRows
  int device = 0;
};

// One tiny kernel (one thread per expert) that writes the per-group arguments of both GEMMs. Launched with PDL
// after the align kernel (it waits for it).
Status LaunchGroupedGemmSetup(const GroupedGemmGroups& groups, const GroupedGemmProblem& gate_up,
                              const GroupedGemmProblem& down, cudaStream_t stream);
// The CTA tile HPC_XLA_MOE_GEMM_TILE asks for (read once), for A/B runs: unset -> m 0 (tile_m decides), n 256;
// "128x256" | "128x128" | "64x256" | "64x128" -> that tile (fp8_block128 always runs N 128, bf16 at M 64 always
// N 256); anything else -> valid false (ValidateFusedMoeCuda reports it). fused_moe_validate.cc.
struct GroupedGemmTile {
  int m = 0, n = 256;
  bool valid = true;
};
GroupedGemmTile GroupedGemmTileFromEnv();

// HPC_XLA_MOE_ACT (read once; an A/B switch): where silu(gate) * up runs when w13 is interleaved. Unset or
// "epilogue": the gate-up GEMM's epilogue wherever that kernel exists (GroupedGemmActInEpilogue); "kernel": always
// the act kernel (reading the interleaved gate_up). Anything else -> kInvalid. fused_moe_validate.cc.
enum class GroupedAct { kEpilogue, kKernel, kInvalid };
GroupedAct GroupedActFromEnv();

// HPC_XLA_MOE_GEMM_CLUSTER (read once; experiment 33): unset or "n2" -> the 128x256 bf16 / fp8_tensor tiles (both
// GEMMs, with or without the activation epilogue) run in clusters of 2 CTAs along N whose A k-blocks arrive by TMA
// multicast (the default since session 33: Mixtral -2..6%, Hy3 T >= 4096 -1..3%, Qwen3 unchanged on the H100), and
// so do fp8_block128's 128x128 tiles (experiment 34, session 34: DeepSeek-V3 EP8 -8% at T=4096, -11% at 16384 on
// the H100; =m2 leaves those one-CTA);
// "1" -> one-CTA clusters (the kernels before it); "m2" -> clusters of 2 along M sharing B (experiment 18's form, kept
// for comparison); anything else -> kInvalid. fused_moe_validate.cc.
enum class GroupedCluster { kOne, kN2, kM2, kInvalid };
GroupedCluster GroupedClusterFromEnv();
// HPC_XLA_MOE_NARROW_CLUSTER (read once; experiment 37): the 64-row ping-pong tiles (every quant) in clusters of 2
// along N with A by TMA multicast (unset or "n2", the default since session 35) or in one-CTA clusters ("1");
// anything else -> kInvalid. Independent of HPC_XLA_MOE_GEMM_CLUSTER, which picks the 128-row tiles' clusters.
GroupedCluster NarrowClusterFromEnv();

// Whether the gate-up GEMM computes the activation in its epilogue: w13 interleaved, the act not forced into the
// kernel, and a configuration that has that kernel (fp8_tensor or bf16 on the 128-row cooperative tiles, 128x256 /
// 128x128, and fp8_tensor on the 64-row ping-pong tiles, 64x256 / 64x128; fp8_block128 never interleaves). tile_m:
// GroupedGemmGroups::tile_m.
inline bool GroupedGemmActInEpilogue(MoeQuant quant, int tile_m, bool w13_interleaved) {
  if (!w13_interleaved || GroupedActFromEnv() == GroupedAct::kKernel || quant == MoeQuant::kFp8Block128) return false;
  const GroupedGemmTile env = GroupedGemmTileFromEnv();
  const int m = env.m != 0 ? env.m : tile_m;
  return m == 128 || (m == 64 && quant == MoeQuant::kFp8Tensor);  // fp8_tensor's ping-pong tiles have it too
}

// The grouped GEMM itself (persistent grid of one CTA per SM). Waits for all earlier kernels of the stream
// (PDL wait before its first global read), so the setup kernel and the producers of A must precede it.
Status LaunchGroupedGemm(const GroupedGemmGroups& groups, const GroupedGemmProblem& problem, cudaStream_t stream);

}  // namespace hpc::moe
