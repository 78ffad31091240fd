#include <cmath>
#include <string>

#include "csrc/common/check.h"
#include "csrc/moe/route.h"

namespace hpc {

Status ValidateMoeRoute(const MoeRouteArgs& a, const char* op) {
  ArgCheck c(op);
  HPC_RETURN_IF_ERROR(c.Required("router_logits", a.router_logits, 2, "[T, E]"));
  HPC_RETURN_IF_ERROR(c.Dtype("router_logits", a.router_logits, {DType::kF32, DType::kBF16, DType::kF16}));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("router_logits", a.router_logits));
  const int64_t tokens = a.router_logits.shape[0], experts = a.router_logits.shape[1];
  if (experts < 1 || experts > kMaxRouteExperts) {
    return c.Fail("the number of experts (router_logits.shape[1]) must be in [1, " +
                  std::to_string(kMaxRouteExperts) + "]; got " + std::to_string(experts));
  }
  if (a.top_k < 1 || a.top_k > experts || a.top_k > kMaxRouteTopK) {
    return c.Fail("top_k must be in [1, min(num_experts=" + std::to_string(experts) + ", " +
                  std::to_string(kMaxRouteTopK) + ")]; got " + std::to_string(a.top_k));
  }
  if (tokens * a.top_k > (int64_t{1} << 30)) {  // the kernel counts tokens in int (and fused_moe takes no more)
    return c.Fail("T * top_k must be <= 2^30; got " + std::to_string(tokens) + " * " + std::to_string(a.top_k));
  }
  if (a.scoring != RouteScoring::kSoftmax && a.scoring != RouteScoring::kSigmoid) {
    return c.Fail("scoring must be 'softmax' or 'sigmoid'");
  }
  if (a.num_groups > 1) {
    if (experts % a.num_groups != 0) {
      return c.Fail("num_groups (" + std::to_string(a.num_groups) + ") must divide the number of experts (" +
                    std::to_string(experts) + ")");
    }
    if (a.num_groups > 64) return c.Fail("num_groups must be <= 64; got " + std::to_string(a.num_groups));
    if (a.topk_groups < 1 || a.topk_groups > a.num_groups) {
      return c.Fail("topk_groups must be in [1, num_groups=" + std::to_string(a.num_groups) + "]; got " +
                    std::to_string(a.topk_groups));
    }
    if (a.top_k > a.topk_groups * (experts / a.num_groups)) {
      return c.Fail("top_k (" + std::to_string(a.top_k) + ") exceeds the experts in the kept groups (" +
                    std::to_string(a.topk_groups * (experts / a.num_groups)) + ")");
    }
  } else if (a.num_groups < 0) {
    return c.Fail("num_groups must be >= 0; got " + std::to_string(a.num_groups));
  }
  if (!(a.routed_scaling > 0.0f) || !std::isfinite(a.routed_scaling)) {
    return c.Fail("routed_scaling must be finite and > 0; got " + std::to_string(a.routed_scaling));
  }
  if (a.correction_bias.present()) {
    HPC_RETURN_IF_ERROR(c.Dense("correction_bias", a.correction_bias, "[E]", {DType::kF32, DType::kBF16, DType::kF16},
                                {{experts, "num_experts, from router_logits"}}, "router_logits", a.router_logits));
  }
  HPC_RETURN_IF_ERROR(c.Dense("topk_weights", a.topk_weights, "[T, top_k]", {DType::kF32},
                              {{tokens, "T, from router_logits"}, {a.top_k, "top_k"}}, "router_logits",
                              a.router_logits));
  HPC_RETURN_IF_ERROR(c.Dense("topk_ids", a.topk_ids, "[T, top_k]", {DType::kI32},
                              {{tokens, "T, from router_logits"}, {a.top_k, "top_k"}}, "router_logits",
                              a.router_logits));
  HPC_RETURN_IF_ERROR(c.Disjoint("topk_weights", a.topk_weights, "topk_ids", a.topk_ids));
  HPC_RETURN_IF_ERROR(c.Disjoint("topk_weights", a.topk_weights, "router_logits", a.router_logits));
  return c.Disjoint("topk_ids", a.topk_ids, "router_logits", a.router_logits);
}

}  // namespace hpc
