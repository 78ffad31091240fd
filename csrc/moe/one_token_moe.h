// The single-token fp8_tensor MoE layer in two kernels that stream every hit expert's w13 and w2 at once (the
// decode regime's T = 1; fused_moe_stream.cu picks it where it fits one wave). See one_token_moe.cu for the design.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

struct OneTokenMoeArgs {
  const void* x;                // [1, H] bf16, or e4m3 when x_fp8 (scaled by a13_scale either way)
  bool x_fp8;
  const uint8_t* w13;           // [E, 2I, H] e4m3, vLLM's or the interleaved layout (w13_interleaved)
  bool w13_interleaved;
  const float* w13_scale;       // [E]
  const uint8_t* w2;            // [E, H, I] e4m3
  const float* w2_scale;        // [E]
  const float* a13_scale;       // [1]: x's static scale
  const float* a2_scale;        // [1]: the intermediate's static scale
  const int32_t* ids;           // [1, top_k] global expert ids
  const float* weights;         // [1, top_k]
  const __nv_bfloat16* shared;  // [1, H] or nullptr
  __nv_bfloat16* out;           // [1, H]
  float* partials;              // [top_k, I / W, H] f32 scratch (OneTokenPartialBytes, fused_moe_plan.h)
  int top_k, experts, expert_offset, hidden, inter_size;
};

// Whether it takes these shapes (T = 1, W = OneTokenUnitCols > 0, top_k <= 64), its CTAs, how many of them an SM
// holds, and whether its grid is one wave on `device` (cudaOccupancyMaxActiveClusters: clusters of up to 8 CTAs
// pack into GPCs, so CTAs per SM x SMs overstates it; answered once per shape).
bool OneTokenMoeFits(int tokens, int top_k, int hidden, int inter_size);
int64_t OneTokenMoeCtas(int top_k, int hidden, int inter_size);
constexpr int kOneTokenMoeCtasPerSm = 3;
bool OneTokenMoeOneWave(int top_k, int hidden, int inter_size, bool x_fp8, int device);

// out = the layer (+ shared): the pairs of other ranks' experts contribute 0.
Status LaunchOneTokenMoe(const OneTokenMoeArgs& a, cudaStream_t stream);

}  // namespace hpc::moe
