// Fused MoE layer (DESIGN.md API item 5):
//   y[t] = sum_j w[t,j] * W2_e(act(W13_e[:I] x_t) * (W13_e[I:] x_t)) (+ shared_output[t]),  e = ids[t,j] - offset
// over the j whose expert is local (expert_offset <= id < expert_offset + E); others contribute 0.
// Quantization: none (bf16 weights and activations), fp8_tensor (per-expert weight scales, static activation
// scales a13/a2), fp8_block128 (128x128 weight blocks, activations quantized per token per 128 columns).
#pragma once

#include <cstdint>

#include "csrc/common/numeric.h"
#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"
#include "csrc/moe/route.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc {

enum class MoeQuant : int32_t { kNone = 0, kFp8Tensor = 1, kFp8Block128 = 2 };
enum class MoeActivation : int32_t { kSilu = 0 };

constexpr int kMoeBlock = 128;  // fp8_block128 block edge

struct FusedMoeArgs {
  TensorView x;              // [T, H] bf16, or float8_e4m3fn already quantized (then x_scale)
  TensorView x_scale;        // fp8 x: fp8_tensor -> unused (a13_scale is x's scale); block128 -> [T, H/128] f32
  TensorView w13;            // [E, 2I, H] bf16 | float8_e4m3fn; rows [:I] gate, [I:] up (or w13_interleaved)
  TensorView w2;             // [E, H, I]
  TensorView w13_scale;      // fp8_tensor: [E] f32; block128: [E, 2I/128, H/128] f32
  TensorView w2_scale;       // fp8_tensor: [E] f32; block128: [E, H/128, I/128] f32
  TensorView a13_scale;      // fp8_tensor: f32 scalar (static activation scale of x)
  TensorView a2_scale;       // fp8_tensor: f32 scalar (static activation scale of the intermediate)
  TensorView topk_weights;   // [T, k] f32 (written with fused routing)
  TensorView topk_ids;       // [T, k] int32 (global expert ids; written with fused routing)
  TensorView shared_output;  // optional [T, H] bf16, added to y
  // optional int32 [1]: a traced expert_offset (jax under shard_map) that hpc_xla.jax already folded into topk_ids
  // (expert_offset is then 0): 0 <= it <= num_experts_global - E is checked here (CheckTracedOffset) -- on the CPU,
  // and on the GPU under HPC_XLA_CHECK -- since a wrong one gives zeros or other experts' results, not an error.
  TensorView traced_offset;
  TensorView out;            // [T, H] bf16, written
  TensorView workspace;      // CUDA path: uint8 [>= FusedMoeWorkspaceBytes(...)] scratch; the CPU path ignores it
  MoeQuant quant = MoeQuant::kNone;
  MoeActivation activation = MoeActivation::kSilu;
  int64_t expert_offset = 0;
  int64_t num_experts_global = 0;  // ids must be < this (0: E + expert_offset)
  // w13's rows interleaved in blocks of 64 (hpc_xla.moe_layout.interleave_w13; quant None | fp8_tensor): gate
  // column c in row W13GateRow(c), its up column 64 rows below. Lets the grouped path compute silu(gate) * up in
  // its gate-up GEMM's epilogue (moe_act_epilogue_sm90.h); every path reads either layout.
  bool w13_interleaved = false;
  // Fused routing: with route.router_logits present, the op routes first (moe_route's rule, route.h) and
  // topk_weights / topk_ids are OUTPUTS it writes -- route.topk_weights / route.topk_ids are the same views, and
  // route.top_k is topk_ids.shape[1]. moe_route's kernel runs as the pipeline's first stage on every path.
  MoeRouteArgs route;
};

inline bool Routed(const FusedMoeArgs& a) { return a.route.router_logits.present(); }

// Turns fused routing on: the routing writes the op's topk_weights / topk_ids (set first), top_k from topk_ids.
// (The options: SetRouteOptions(a.route, ...).)
inline void SetFusedRouting(FusedMoeArgs& a, const TensorView& router_logits,
                            const TensorView& correction_bias) {
  a.route.router_logits = router_logits;
  a.route.correction_bias = correction_bias;
  a.route.topk_weights = a.topk_weights;
  a.route.topk_ids = a.topk_ids;
  a.route.top_k = a.topk_ids.rank == 2 ? static_cast<int>(a.topk_ids.shape[1]) : 0;
}

// The w13 layouts (FusedMoeArgs::w13_interleaved): the row holding gate column c, and how far below it the
// matching up row is. vLLM's: c and I + c. Interleaved: 128 (c / 64) + c % 64 and 64 further. Any run of columns
// inside one aligned 64-block stays contiguous in both, which is what the kernels' 8- to 64-column units rely on.
constexpr int kW13InterleaveRows = 64;
HPC_HD int64_t W13GateRow(int64_t c, bool interleaved) {
  return interleaved ? (c / kW13InterleaveRows) * 2 * kW13InterleaveRows + c % kW13InterleaveRows : c;
}
HPC_HD int64_t W13UpDelta(int64_t inter, bool interleaved) { return interleaved ? kW13InterleaveRows : inter; }

// The routing's expert count: num_experts_global, or E + expert_offset when it is not given.
inline int64_t GlobalExperts(const FusedMoeArgs& a) {
  return a.num_experts_global > 0 ? a.num_experts_global : a.w13.shape[0] + a.expert_offset;
}

// The CUDA pipeline's M tile (rows of one expert per grouped-GEMM tile: 16/32/64 = the tiled mma.sync path,
// 128 = the CUTLASS WGMMA grouped path) and the scratch it needs. One source of truth for both (see
// fused_moe_plan.h): pure functions of the shapes (and of HPC_XLA_MOE_PATH, read once), so XLA / CUDA graphs
// can size the workspace at trace time. `experts` = local experts E (w13.shape[0]).
int FusedMoeTileM(int64_t tokens, int64_t top_k, int64_t experts, MoeQuant quant);
// Rows of the grouped path's CTA tile (64 ping-pong | 128 cooperative) when TileM picks that path, ignoring
// HPC_XLA_MOE_GEMM_TILE; experts_global = the routing's expert count (0: unknown, the local count).
int FusedMoeGroupedCtaRows(int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, MoeQuant quant);
// Whether the grouped path's gate-up GEMM computes silu(gate) * up in its epilogue: w13_interleaved, a configuration
// that has that kernel (bf16 | fp8_tensor on 128-row tiles) and HPC_XLA_MOE_ACT not "kernel"; false wherever the
// grouped path is not taken.
bool FusedMoeActInEpilogue(int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, MoeQuant quant,
                           bool w13_interleaved);
// Gate-up GEMM launches in this process whose epilogue computed the activation (the tests' proof that it ran).
int64_t FusedMoeActEpilogueLaunches();
// Grouped GEMM launches in this process in 2-CTA clusters (HPC_XLA_MOE_GEMM_CLUSTER unset / n2 / m2, experiment 33).
int64_t FusedMoeGemmClusterLaunches();
// Grouped-path gathers in this process that ran by tokens (HPC_XLA_MOE_GATHER=tokens).
int64_t FusedMoeGatherByTokensLaunches();
// Stream-path wgmma gate-up launches in this process.
int64_t FusedMoeWgmmaGateUpLaunches();
// What one call with `tokens` tokens needs (the CUDA path checks the workspace against it). experts_global and
// w13_interleaved as the call passes them (num_experts_global, 0 if not given): with an interleaved w13 the grouped
// path computes the activation in its gate-up epilogue and needs no gate_up rows (FusedMoeActInEpilogue).
int64_t FusedMoeWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                               MoeQuant quant, int64_t experts_global = 0, bool w13_interleaved = false);
// What serves every call with at most `max_tokens` tokens (>= FusedMoeWorkspaceBytes of each; the per-call size is
// not monotone in T): the size to preallocate once, e.g. for CUDA-graph capture at the largest batch.
int64_t FusedMoeMaxWorkspaceBytes(int64_t max_tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                                  MoeQuant quant, int64_t experts_global = 0, bool w13_interleaved = false);

// The shapes a (CUDA) workspace size is asked for, by the op's rules and the CUDA path's (H / I, quant,
// w13_interleaved, num_experts_global >= E and >= top_k when given, T * top_k <= 2^30, E <= kMaxMoeCudaExperts):
// fused_moe_workspace_size answers only shapes a CUDA call takes. `op` names the caller in the message.
Status ValidateMoeWorkspaceShapes(const char* op, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                  int64_t inter, MoeQuant quant, int64_t experts_global, bool w13_interleaved);
Status ValidateFusedMoe(const FusedMoeArgs& args);
// The traced expert_offset's value (read to the host) against E and num_experts_global (FusedMoeArgs::traced_offset).
Status CheckTracedOffset(const FusedMoeArgs& args, int64_t value);
// ValidateFusedMoe plus what the CUDA pipeline needs on top: H and I multiples of 64, E <= kMaxMoeCudaExperts,
// a large enough workspace.
Status ValidateFusedMoeCuda(const FusedMoeArgs& args);
constexpr int kMaxMoeCudaExperts = 1024;
Status FusedMoeCuda(const FusedMoeArgs& args, cudaStream_t stream);
Status FusedMoeCpu(const FusedMoeArgs& args);

}  // namespace hpc
