// MoE ops for torch (and any DLPack producer): outputs written in place, nothing allocated.
#include <nanobind/nanobind.h>

#include "csrc/moe/fused_moe.h"
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
  SetRouteOptions(a, scoring, renormalize, num_groups, topk_groups, routed_scaling);
  RunOp(a.router_logits, t, stream, &MoeRouteCuda, &MoeRouteCpu, a);
}

// fused_moe's operands but the routing's (topk_* or router_logits), shared by both bindings.
FusedMoeArgs FusedMoeCommon(TensorArgs& t, nb::handle x, nb::handle x_scale, nb::handle w13, nb::handle w2,
                            nb::handle w13_scale, nb::handle w2_scale, nb::handle a13_scale, nb::handle a2_scale,
                            nb::handle topk_weights, nb::handle topk_ids, nb::handle shared_output, nb::handle out,
                            nb::handle workspace, int quant, int64_t expert_offset, int64_t num_experts_global,
                            bool w13_interleaved) {
  FusedMoeArgs a;
  a.x = t.Get("x", x);
  a.x_scale = t.Get("x_scale", x_scale);
  a.w13 = t.Get("w13", w13);
  a.w2 = t.Get("w2", w2);
  a.w13_scale = t.Get("w13_scale", w13_scale);
  a.w2_scale = t.Get("w2_scale", w2_scale);
  a.a13_scale = t.Get("a13_scale", a13_scale);
  a.a2_scale = t.Get("a2_scale", a2_scale);
  a.topk_weights = t.Get("topk_weights", topk_weights);
  a.topk_ids = t.Get("topk_ids", topk_ids);
  a.shared_output = t.Get("shared_output", shared_output);
  a.out = t.Get("out", out);
  a.workspace = t.Get("workspace", workspace);
  a.quant = static_cast<MoeQuant>(quant);
  a.expert_offset = expert_offset;
  a.num_experts_global = num_experts_global;
  a.w13_interleaved = w13_interleaved;
  return a;
}

void FusedMoeBinding(nb::handle x, nb::handle x_scale, nb::handle w13, nb::handle w2, nb::handle w13_scale,
                     nb::handle w2_scale, nb::handle a13_scale, nb::handle a2_scale, nb::handle topk_weights,
                     nb::handle topk_ids, nb::handle shared_output, nb::handle out, nb::handle workspace, int quant,
                     int64_t expert_offset, int64_t num_experts_global, bool w13_interleaved, int64_t stream) {
  TensorArgs t;
  const FusedMoeArgs a = FusedMoeCommon(t, x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, topk_weights,
                                        topk_ids, shared_output, out, workspace, quant, expert_offset,
                                        num_experts_global, w13_interleaved);
  RunOp(a.x, t, stream, &FusedMoeCuda, &FusedMoeCpu, a);
}

// Fused routing: topk_weights / topk_ids are written (router_logits routed by moe_route's rule, then the layer).
void FusedMoeRoutedBinding(nb::handle x, nb::handle x_scale, nb::handle w13, nb::handle w2, nb::handle w13_scale,
                           nb::handle w2_scale, nb::handle a13_scale, nb::handle a2_scale, nb::handle router_logits,
                           nb::handle correction_bias, nb::handle topk_weights, nb::handle topk_ids,
                           nb::handle shared_output, nb::handle out, nb::handle workspace, int quant,
                           int64_t expert_offset, int64_t num_experts_global, bool w13_interleaved, int scoring,
                           bool renormalize, int num_groups, int topk_groups, float routed_scaling, int64_t stream) {
  TensorArgs t;
  FusedMoeArgs a = FusedMoeCommon(t, x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, topk_weights,
                                  topk_ids, shared_output, out, workspace, quant, expert_offset, num_experts_global,
                                  w13_interleaved);
  SetFusedRouting(a, t.Get("router_logits", router_logits), t.Get("correction_bias", correction_bias));
  SetRouteOptions(a.route, scoring, renormalize, num_groups, topk_groups, routed_scaling);
  RunOp(a.x, t, stream, &FusedMoeCuda, &FusedMoeCpu, a);
}

// The two workspace sizes take the same arguments (the quant as its code).
using WorkspaceBytesFn = int64_t (*)(int64_t, int64_t, int64_t, int64_t, int64_t, MoeQuant, int64_t, bool);
// `refuse`: a shape the CUDA op refuses raises (the public fused_moe_workspace_size), or answers 0 (the per-call
// size the wrappers ask before the op runs: the op then names the problem in its own words -- a rank, a parity,
// the argument the user passed -- which the size's arguments cannot).
void BindWorkspaceSize(nb::module_& m, const char* name, bool refuse, WorkspaceBytesFn bytes, const char* doc) {
  m.def(
      name,
      [name, refuse, bytes](int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter, int quant,
                            int64_t experts_global, bool w13_interleaved) -> int64_t {
        const MoeQuant q = static_cast<MoeQuant>(quant);
        const Status ok =
            ValidateMoeWorkspaceShapes(name, tokens, top_k, experts, hidden, inter, q, experts_global, w13_interleaved);
        if (!ok.ok()) {
          if (refuse) ThrowIfError(ok);
          return 0;
        }
        return bytes(tokens, top_k, experts, hidden, inter, q, experts_global, w13_interleaved);
      },
      nb::arg("tokens"), nb::arg("top_k"), nb::arg("experts"), nb::arg("hidden"), nb::arg("inter"), nb::arg("quant"),
      nb::arg("experts_global") = 0, nb::arg("w13_interleaved") = false, doc);
}

}  // namespace

void BindMoe(nb::module_& m) {
  m.def("fused_moe", &FusedMoeBinding, nb::arg("x"), nb::arg("x_scale").none(), nb::arg("w13"), nb::arg("w2"),
        nb::arg("w13_scale").none(), nb::arg("w2_scale").none(), nb::arg("a13_scale").none(),
        nb::arg("a2_scale").none(), nb::arg("topk_weights"), nb::arg("topk_ids"), nb::arg("shared_output").none(),
        nb::arg("out"), nb::arg("workspace"), nb::arg("quant"), nb::arg("expert_offset"),
        nb::arg("num_experts_global"), nb::arg("w13_interleaved") = false, nb::arg("stream") = -1);
  m.def("fused_moe_routed", &FusedMoeRoutedBinding, nb::arg("x"), nb::arg("x_scale").none(), nb::arg("w13"),
        nb::arg("w2"), nb::arg("w13_scale").none(), nb::arg("w2_scale").none(), nb::arg("a13_scale").none(),
        nb::arg("a2_scale").none(), nb::arg("router_logits"), nb::arg("correction_bias").none(),
        nb::arg("topk_weights"), nb::arg("topk_ids"), nb::arg("shared_output").none(), nb::arg("out"),
        nb::arg("workspace"), nb::arg("quant"), nb::arg("expert_offset"), nb::arg("num_experts_global"),
        nb::arg("w13_interleaved"), nb::arg("scoring"), nb::arg("renormalize"), nb::arg("num_groups"),
        nb::arg("topk_groups"), nb::arg("routed_scaling"), nb::arg("stream") = -1);
  BindWorkspaceSize(m, "fused_moe_workspace_size", true, &FusedMoeMaxWorkspaceBytes,
                    "Bytes of a CUDA fused_moe workspace (uint8) that serves every call of at most `tokens` tokens "
                    "with these shapes (local experts E = w13.shape[0]; experts_global and w13_interleaved as the "
                    "calls pass them).");
  BindWorkspaceSize(m, "fused_moe_call_workspace_size", false, &FusedMoeWorkspaceBytes,
                    "Bytes of the CUDA fused_moe workspace one call of exactly `tokens` tokens needs (not monotone in "
                    "tokens); 0 for shapes the CUDA op refuses (the op names them).");
  m.def(
      "fused_moe_tile_m",
      [](int64_t tokens, int64_t top_k, int64_t experts, int quant) {
        return FusedMoeTileM(tokens, top_k, experts, static_cast<MoeQuant>(quant));
      },
      nb::arg("tokens"), nb::arg("top_k"), nb::arg("experts"), nb::arg("quant"),
      "The CUDA pipeline's M tile (rows of one expert per grouped-GEMM tile) for these shapes.");
  m.def(
      "fused_moe_grouped_cta_rows",
      [](int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, int quant) {
        return FusedMoeGroupedCtaRows(tokens, top_k, experts, experts_global, static_cast<MoeQuant>(quant));
      },
      nb::arg("tokens"), nb::arg("top_k"), nb::arg("experts"), nb::arg("experts_global"), nb::arg("quant"),
      "Rows of the grouped path's CTA tile (64 | 128) for these shapes, when that path runs.");
  m.def(
      "fused_moe_act_in_epilogue",
      [](int64_t tokens, int64_t top_k, int64_t experts, int64_t experts_global, int quant, bool w13_interleaved) {
        return FusedMoeActInEpilogue(tokens, top_k, experts, experts_global, static_cast<MoeQuant>(quant),
                                     w13_interleaved);
      },
      nb::arg("tokens"), nb::arg("top_k"), nb::arg("experts"), nb::arg("experts_global"), nb::arg("quant"),
      nb::arg("w13_interleaved") = false,
      "Whether the grouped gate-up GEMM computes the activation in its epilogue for these shapes (only with an "
      "interleaved w13, and not under HPC_XLA_MOE_ACT=kernel).");
  m.def("fused_moe_act_epilogue_launches", &FusedMoeActEpilogueLaunches,
        "Gate-up GEMM launches in this process whose epilogue computed the activation (interleaved w13).");
  m.def("fused_moe_gemm_cluster_launches", &FusedMoeGemmClusterLaunches,
        "Grouped GEMM launches in this process in 2-CTA clusters (HPC_XLA_MOE_GEMM_CLUSTER unset / n2 / m2, experiment 33).");
  m.def("fused_moe_gather_by_tokens_launches", &FusedMoeGatherByTokensLaunches,
        "Grouped-path gathers in this process that ran by tokens (HPC_XLA_MOE_GATHER=tokens).");
  m.def("fused_moe_wgmma_gate_up_launches", &FusedMoeWgmmaGateUpLaunches,
        "Stream-path gate-up launches in this process on wgmma (HPC_XLA_MOE_UP_WGMMA, or the T=1 default).");
  m.def("moe_route", &MoeRouteBinding, nb::arg("router_logits"), nb::arg("correction_bias").none(),
        nb::arg("topk_weights"), nb::arg("topk_ids"), nb::arg("top_k"), nb::arg("scoring"), nb::arg("renormalize"),
        nb::arg("num_groups"), nb::arg("topk_groups"), nb::arg("routed_scaling"), nb::arg("stream") = -1);
}

}  // namespace hpc::bridge
