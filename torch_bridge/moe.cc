// MoE ops for torch (and any DLPack producer): outputs written in place, nothing allocated.
#include <nanobind/nanobind.h>

#include "csrc/moe/route.h"
#include "torch_bridge/bindings.h"
#include "torch_bridge/tensor_args.h"

namespace hpc::bridge {
namespace {

void MoeRouteBinding(nb::handle router_logits, nb::handle correction_bias, nb::handle topk_weights,
                     nb::handle topk_ids, int top_k, int scoring, bool renormalize, int num_groups, int topk_groups,
                     float routed_scaling, int64_t stream) {
  TensorArgs t;
  MoeRouteArgs a;
  a.router_logits = t.Get("router_logits", router_logits);
  a.correction_bias = t.Get("correction_bias", correction_bias);
  a.topk_weights = t.Get("topk_weights", topk_weights);
  a.topk_ids = t.Get("topk_ids", topk_ids);
  a.top_k = top_k;
  a.scoring = static_cast<RouteScoring>(scoring);
  a.renormalize = renormalize;
  a.num_groups = num_groups;
  a.topk_groups = topk_groups;
  a.routed_scaling = routed_scaling;
  RunOp(a.router_logits, t, stream, &MoeRouteCuda, &MoeRouteCpu, a);
}

}  // namespace

void BindMoe(nb::module_& m) {
  m.def("moe_route", &MoeRouteBinding, nb::arg("router_logits"), nb::arg("correction_bias").none(),
        nb::arg("topk_weights"), nb::arg("topk_ids"), nb::arg("top_k"), nb::arg("scoring"), nb::arg("renormalize"),
        nb::arg("num_groups"), nb::arg("topk_groups"), nb::arg("routed_scaling"), nb::arg("stream") = -1);
}

}  // namespace hpc::bridge
