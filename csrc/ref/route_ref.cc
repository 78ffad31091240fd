// CPU reference of moe_route: one token at a time, serially, with the documented tie rule (lower index first).
#include <cmath>
#include <limits>
#include <vector>

#include "csrc/moe/route.h"
#include "csrc/ref/element_access.h"

namespace hpc {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Index of the largest value among `allowed` entries (lowest index on ties), -1 if none.
int ArgMax(const std::vector<float>& v, const std::vector<char>& allowed) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(v.size()); ++i) {
    if (allowed[i] && (best < 0 || v[i] > v[best])) best = i;
  }
  return best;
}

}  // namespace

Status MoeRouteCpu(const MoeRouteArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateMoeRoute(a));
  if (a.router_logits.device != DeviceKind::kCpu) return Status::Internal("moe_route: CPU path called with GPU tensors");
  const int64_t tokens = a.router_logits.shape[0];
  const int experts = static_cast<int>(a.router_logits.shape[1]);
  const bool grouped = a.num_groups > 1;
  const int group_size = grouped ? experts / a.num_groups : experts;
  std::vector<float> score(experts), select(experts), group_rank(grouped ? a.num_groups : 0);
  std::vector<char> allowed(experts), group_allowed(grouped ? a.num_groups : 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = t * a.router_logits.strides[0];
    float mx = kNegInf;
    for (int e = 0; e < experts; ++e) {
      score[e] = ref::LoadFloat(a.router_logits, row + e);
      mx = std::max(mx, score[e]);
    }
    if (a.scoring == RouteScoring::kSoftmax) {
      float sum = 0.f;
      for (int e = 0; e < experts; ++e) sum += (score[e] = std::exp(score[e] - mx));
      for (int e = 0; e < experts; ++e) score[e] /= sum;
    } else {
      for (int e = 0; e < experts; ++e) score[e] = 1.f / (1.f + std::exp(-score[e]));
    }
    for (int e = 0; e < experts; ++e) {
      select[e] = score[e] + (a.correction_bias.present() ? ref::LoadFloat(a.correction_bias, e) : 0.f);
      allowed[e] = 1;
    }
    if (grouped) {
      for (int g = 0; g < a.num_groups; ++g) {
        float first = kNegInf, second = kNegInf;
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
          if (select[e] > first) {
            second = first;
            first = select[e];
          } else if (select[e] > second) {
            second = select[e];
          }
        }
        group_rank[g] = a.correction_bias.present() && group_size > 1 ? first + second : first;
        group_allowed[g] = 1;
      }
      std::vector<char> kept(a.num_groups, 0);
      for (int i = 0; i < a.topk_groups; ++i) {
        const int g = ArgMax(group_rank, group_allowed);
        kept[g] = 1;
        group_allowed[g] = 0;
      }
      for (int e = 0; e < experts; ++e) allowed[e] = kept[e / group_size];
    }
    float* weights = a.topk_weights.ptr<float>() + t * a.top_k;
    int32_t* ids = a.topk_ids.ptr<int32_t>() + t * a.top_k;
    float total = 0.f;
    for (int j = 0; j < a.top_k; ++j) {
      const int e = ArgMax(select, allowed);
      allowed[e] = 0;
      ids[j] = e;
      weights[j] = score[e];
      total += score[e];
    }
    const float norm = a.renormalize && total > 0.f ? a.routed_scaling / total : a.routed_scaling;
    for (int j = 0; j < a.top_k; ++j) weights[j] *= norm;
  }
  return Status::Ok();
}

}  // namespace hpc
