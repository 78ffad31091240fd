// MoE routing (DESIGN.md API item 4): router logits -> top-k expert ids and weights, softmax or sigmoid
// scoring, optional correction bias (used for selection only) and DeepSeek-style grouped top-k.
//   score_e  = softmax(logits)_e | sigmoid(logit_e)            (fp32)
//   select_e = score_e + bias_e (bias given) | score_e
//   groups   = num_groups consecutive runs of E/num_groups experts; a group's rank is the sum of its two best
//              select values (bias given) or its best one; only the topk_groups best groups stay eligible
//   ids      = the top_k eligible experts by select, best first (ties: lower index first)
//   weights  = score_ids, / their sum if renormalize, * routed_scaling
#pragma once

#include <cstdint>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc {

enum class RouteScoring : int32_t { kSoftmax = 0, kSigmoid = 1 };

constexpr int kMaxRouteExperts = 1024;
constexpr int kMaxRouteTopK = 32;

struct MoeRouteArgs {
  TensorView router_logits;    // [T, E] f32 | bf16 | f16, last dim contiguous
  TensorView correction_bias;  // optional [E] f32 | bf16 | f16
  TensorView topk_weights;     // [T, top_k] f32, written
  TensorView topk_ids;         // [T, top_k] int32, written
  int top_k = 0;
  RouteScoring scoring = RouteScoring::kSoftmax;
  bool renormalize = true;
  int num_groups = 0;   // 0 or 1: no grouping
  int topk_groups = 0;  // with num_groups > 1: groups kept
  float routed_scaling = 1.0f;
};

// The options as both frontends pass them (FFI attributes, torch binding arguments).
inline void SetRouteOptions(MoeRouteArgs& a, int32_t scoring, bool renormalize, int32_t num_groups,
                            int32_t topk_groups, float routed_scaling) {
  a.scoring = static_cast<RouteScoring>(scoring);
  a.renormalize = renormalize;
  a.num_groups = num_groups;
  a.topk_groups = topk_groups;
  a.routed_scaling = routed_scaling;
}

// `op` names the caller in the messages (fused_moe validates its fused routing here too).
Status ValidateMoeRoute(const MoeRouteArgs& args, const char* op = "moe_route");
Status MoeRouteCuda(const MoeRouteArgs& args, cudaStream_t stream);
// The routing kernel alone, for validated arguments on a Hopper GPU (fused_moe launches it as its first stage).
Status LaunchMoeRoute(const MoeRouteArgs& args, cudaStream_t stream);
Status MoeRouteCpu(const MoeRouteArgs& args);

}  // namespace hpc
