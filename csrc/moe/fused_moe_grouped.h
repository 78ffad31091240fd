// fused_moe's large-T path (M tile 128, see fused_moe_plan.h): what runs after the align kernel.
#pragma once

#include "csrc/common/status.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"

namespace hpc::moe {

// Setup (grouped-GEMM arguments) -> gather -> GEMM1 -> act+quant -> GEMM2 -> reduce, all on `stream`, after the
// align kernel has written plan's counts, sorted rows and pair -> row map. `a` is validated. a_x / a_x_scale: the
// rows GEMM1 reads, per token -- x itself, or x quantized by the quant kernel (plan.x_q, plan.x_q_scale).
Status RunGroupedMoe(const FusedMoeArgs& a, const MoePlan& plan, const uint8_t* a_x, const float* a_x_scale,
                     cudaStream_t stream);

}  // namespace hpc::moe
