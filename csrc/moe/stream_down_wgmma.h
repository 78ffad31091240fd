// The stream path's down stage on Hopper's fp8 tensor cores (wgmma) for single-token fp8_tensor calls, after the
// wgmma gate-up (stream_gate_up_wgmma.h). See stream_down_wgmma.cu for the design; fused_moe_stream.cu picks it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

struct WgmmaDownArgs {
  const uint8_t* inter;          // [top_k, I] e4m3: the gate-up's rows (written for local pairs only)
  const uint8_t* w2;             // [E, H, I] e4m3
  const float* w2_scale;         // [E]
  const float* a2_scale;         // [1]: the intermediate's static scale
  const float* weights;          // [1, top_k]
  const int32_t* ids;            // [1, top_k] global expert ids
  const __nv_bfloat16* shared;   // [1, H] added to the output, or null
  __nv_bfloat16* out;            // [1, H]
  int top_k, experts, expert_offset, hidden, inter_size;
};

// Shapes it takes: one token, top_k <= 8 (a cluster per 64 rows of H, one CTA per slot), H a multiple of 64, I a
// multiple of 16 up to 1024 (the whole K of a CTA's 64 rows is copied in at once, <= 8 groups of 128).
bool StreamDownWgmmaFits(int tokens, int top_k, int hidden, int inter_size);

// out[h] = sum_j (j order) w[j] * (a2_scale * w2_scale[e_j]) * (w2[e_j][h, :] . inter[j, :]) (+ shared[h]) over the
// slots j whose expert is local; launched with PDL after the gate-up kernel (the weights are copied before its wait).
Status LaunchStreamDownWgmma(const WgmmaDownArgs& a, cudaStream_t stream);

}  // namespace hpc::moe
