// fused_moe's decode-regime path (M tile 8, see fused_moe_plan.h): two kernels, no align, quant or reduce
// launches. Gate-up (+ x quantization on load, silu*up, intermediate rounding) -> down (+ intermediate
// quantization on load, the weighted top-k sum, shared_output), PDL-chained; each kernel finds the hit
// experts and their pairs from topk_ids itself.
#pragma once

#include "csrc/common/status.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/moe/fused_moe_plan.h"

namespace hpc::moe {

// `a` is validated and `plan.stream` is set.
Status RunStreamMoe(const FusedMoeArgs& a, const MoePlan& plan, cudaStream_t stream);

}  // namespace hpc::moe
