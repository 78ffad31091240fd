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

// What a routing kernel needs (moe_route's kernel, and fused_moe's stream kernels for fused routing).
struct RouteParams {
  const void* logits;  // null: no routing
  int64_t logits_stride;
  DType logits_dtype;
  const void* bias;
  DType bias_dtype;
  int tokens, experts, top_k, num_groups, topk_groups;
  bool sigmoid, renormalize;
  float routed_scaling;
};

// Validated moe_route arguments -> the kernels' parameters.
inline RouteParams RouteParamsOf(const MoeRouteArgs& a) {
  RouteParams p = {};
  p.logits = a.router_logits.data;
  p.logits_stride = a.router_logits.strides[0];
  p.logits_dtype = a.router_logits.dtype;
  p.bias = a.correction_bias.present() ? a.correction_bias.data : nullptr;
  p.bias_dtype = a.correction_bias.dtype;
  p.tokens = static_cast<int>(a.router_logits.shape[0]);
  p.experts = static_cast<int>(a.router_logits.shape[1]);
  p.top_k = a.top_k;
  p.num_groups = a.num_groups;
  p.topk_groups = a.topk_groups;
  p.sigmoid = a.scoring == RouteScoring::kSigmoid;
  p.renormalize = a.renormalize;
  p.routed_scaling = a.routed_scaling;
  return p;
}

// The most experts fused_moe's stream kernels route in-CTA (8 per lane, in registers: the kernels' routed instances
// keep their registers); above it the routing kernel runs first (route.cu takes up to kMaxRouteExperts).
constexpr int kMaxInKernelRouteExperts = 256;

// Shared memory one routing warp needs (its selection values, for the group ranks).
inline int64_t RouteScratchBytes(int experts) { return int64_t{4} * experts; }

// `op` names the caller in the messages (fused_moe validates its fused routing here too).
Status ValidateMoeRoute(const MoeRouteArgs& args, const char* op = "moe_route");
Status MoeRouteCuda(const MoeRouteArgs& args, cudaStream_t stream);
// The routing kernel alone, for validated arguments on a Hopper GPU (fused_moe's pipeline launches it first).
Status LaunchMoeRoute(const MoeRouteArgs& args, cudaStream_t stream);
Status MoeRouteCpu(const MoeRouteArgs& args);

}  // namespace hpc
