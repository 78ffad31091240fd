// Fused attention prologue: per-head RMSNorm of q and k (optional), rotary embedding, K/V written into the
// paged cache through slot_mapping, q returned in its dtype or quantized to fp8 per (token, head).
// Semantics are DESIGN.md's API contract item 1; this header is the one entry both bindings call.
#pragma once

#include <cstdint>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc {

enum class RopeStyle : int32_t { kNeox = 0, kGptj = 1 };

struct RopeNormArgs {
  TensorView q;              // [T, Hq, D] bf16|fp16, last dim contiguous (token/head strides free)
  TensorView k;              // [T, Hkv, D] q's dtype
  TensorView v;              // [T, Hkv, D] q's dtype
  TensorView positions;      // [T] int32|int64
  TensorView cos_sin_cache;  // [max_pos, rotary_dim] f32|bf16|fp16: cos in [:rot/2], sin in [rot/2:]
  TensorView slot_mapping;   // [T] int32|int64; -1 skips the token's K/V write
  TensorView k_cache;        // [NB, P, Hkv, D] q's dtype or float8_e4m3fn; written in place (strided ok)
  TensorView v_cache;        // same shape and dtype as k_cache
  TensorView q_out;          // [T, Hq, D] q's dtype, or float8_e4m3fn (then q_scale is required); may alias q
  TensorView q_scale;        // [T, Hq] f32 contiguous, only with an fp8 q_out: amax/448 per (token, head)
  TensorView q_norm_weight;  // optional [D] f32|bf16|fp16
  TensorView k_norm_weight;  // optional [D]
  TensorView k_scale;        // float32 scalar; required iff the cache is fp8 (cache stores sat(k/k_scale))
  TensorView v_scale;        // float32 scalar; required iff the cache is fp8
  float eps = 1e-6f;
  RopeStyle rope_style = RopeStyle::kNeox;
  int64_t rotary_dim = 0;  // even, 2..D, == cos_sin_cache.shape[1]
  bool norm_before_rope = true;
};

// Shapes, dtypes, strides and devices. Called by both launchers below; safe to call alone.
Status ValidateRopeNorm(const RopeNormArgs& args);

// CUDA launcher (csrc/rope_norm/rope_norm.cu): validates, checks the GPU is Hopper, launches one kernel.
// With HPC_XLA_CHECK=1 it also validates positions/slot_mapping on the GPU (syncs).
Status RopeNormCuda(const RopeNormArgs& args, cudaStream_t stream);
// What the last RopeNormCuda launch in this process chose (tests read it to prove an A/B knob took effect):
// rows per lane group (0: the general kernel), and whether a token's k and v rows shared a group.
struct RopeNormLaunchInfo {
  int rows_per_group = -1;
  bool kv_merged = false;
};
RopeNormLaunchInfo RopeNormLastLaunch();

// CPU reference (csrc/ref/rope_norm_ref.cc): validates, also checks positions/slot ranges, computes in fp32.
Status RopeNormCpu(const RopeNormArgs& args);

// Data-dependent check shared by the CPU path and the GPU debug mode's report.
Status RopeNormIndexError(int64_t token, int64_t position, int64_t max_pos, int64_t slot, int64_t num_slots);

}  // namespace hpc
