// fused_moe's large-T path (M tile 128, see fused_moe_plan.h): what runs after the align kernel.
#pragma once

#include "csrc/common/status.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"

namespace hpc::moe {

// Setup (grouped-GEMM arguments) -> gather+quant -> GEMM1 -> act+quant -> GEMM2 -> reduce, all on `stream`,
// after the align kernel has written plan's counts, sorted rows and pair -> row map. `a` is validated.
Status RunGroupedMoe(const FusedMoeArgs& a, const MoePlan& plan, cudaStream_t stream);

}  // namespace hpc::moe
