// The stream path's gate-up stage on Hopper's fp8 tensor cores (wgmma), for fp8_tensor at T <= 8 tokens (the
// decode regime), and its single-token form that also runs the down projection (the "T = 1 fused" pair of
// kernels). See stream_gate_up_wgmma.cu for the design; fused_moe_stream.cu picks them (UseWgmmaGateUp, UseT1Fused).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

struct WgmmaGateUpArgs {
  const void* x;             // [T, H] bf16, or e4m3 when x_fp8 (scaled by a13_scale either way)
  bool x_fp8;
  const uint8_t* w13;        // [E, 2I, H] e4m3
  const float* w13_scale;    // [E]
  const float* a13_scale;    // [1]: x's static scale
  const float* a2_scale;     // [1]: the intermediate's static scale
  const int32_t* ids;        // [T, top_k] global expert ids
  uint8_t* inter;            // [T * top_k, I] e4m3 out (the unfused form)
  int tokens, top_k, experts, expert_offset, hidden, inter_size;
};

// What the T = 1 fused form needs on top: the down weights and the layer's output.
struct WgmmaDownArgs {
  const uint8_t* w2;         // [E, H, I] e4m3
  const float* w2_scale;     // [E]
  const float* weights;      // [1, top_k]
  const void* shared;        // [1, H] bf16 or null
  void* out;                 // [1, H] bf16
  float* partials;           // [top_k, I / 32, H] f32 scratch (StreamT1PartialBytes)
};

// Shape rule of both (a pure function of the shapes, shared with the workspace plan): T <= 8 (every token is a
// column of one n8 MMA), T * top_k <= 64, H a multiple of 128 up to 8192 (a cluster of at most 8 CTAs, each <= 8 K
// groups of 128), I a multiple of 32 (units of 32 gate + 32 up rows).
constexpr int kWgmmaUnitCols = 32;     // columns of I per unit
constexpr int kWgmmaGroupK = 128;      // K per group
constexpr int kWgmmaMaxGroups = 8;     // K groups per CTA
constexpr int kWgmmaMaxCluster = 8;    // portable cluster size
constexpr int kWgmmaMaxTokens = 8;     // the wgmma N
constexpr int kWgmmaMaxPairs = 64;

inline bool StreamGateUpWgmmaFits(int64_t tokens, int64_t top_k, int64_t hidden, int64_t inter_size) {
  return tokens >= 1 && tokens <= kWgmmaMaxTokens && tokens * top_k <= kWgmmaMaxPairs &&
         hidden % kWgmmaGroupK == 0 && hidden <= int64_t{kWgmmaGroupK} * kWgmmaMaxGroups * kWgmmaMaxCluster &&
         inter_size % kWgmmaUnitCols == 0;
}

// CTAs per unit: as few as keep each at <= kWgmmaMaxGroups K groups.
inline int64_t StreamGateUpWgmmaCluster(int64_t hidden) {
  return (hidden / kWgmmaGroupK + kWgmmaMaxGroups - 1) / kWgmmaMaxGroups;
}

// Its grid (CTAs: one cluster per pair slot x 32 columns of I) and how many of its CTAs an SM holds (the shared
// memory of 8 K groups, 74 KB: 3), for the caller's one-wave test.
inline int64_t StreamGateUpWgmmaCtas(int64_t tokens, int64_t top_k, int64_t hidden, int64_t inter_size) {
  return tokens * top_k * (inter_size / kWgmmaUnitCols) * StreamGateUpWgmmaCluster(hidden);
}
constexpr int kStreamGateUpWgmmaCtasPerSm = 3;

// The T = 1 fused form: where the gate-up fits and its grid is at most kT1FusedMaxCtas (a bound free of the GPU's
// SM count, so the workspace plan can use it; the launcher also wants one wave). Its scratch: the per-(pair,
// 32-column block of I) partial down rows, f32 [top_k, I / 32, H].
constexpr int64_t kT1FusedMaxCtas = 1024;
inline bool StreamT1FusedFits(int64_t top_k, int64_t hidden, int64_t inter_size) {
  return StreamGateUpWgmmaFits(1, top_k, hidden, inter_size) &&
         StreamGateUpWgmmaCtas(1, top_k, hidden, inter_size) <= kT1FusedMaxCtas;
}
inline int64_t StreamT1PartialBytes(int64_t top_k, int64_t hidden, int64_t inter_size) {
  return top_k * (inter_size / kWgmmaUnitCols) * hidden * 4;
}

// Writes inter[pair, :] = e4m3(silu(gate) * up / a2_scale) for every pair whose expert is local; the pairs of
// other ranks' experts are not written (the down kernel skips them).
Status LaunchStreamGateUpWgmma(const WgmmaGateUpArgs& a, cudaStream_t stream);

// T = 1: out = sum_j w_j * down_j (+ shared), two kernels (the gate-up grid computing each unit's partial down rows,
// then a reduce over the units in a fixed order); a.tokens must be 1 and StreamT1FusedFits hold.
Status LaunchStreamT1Fused(const WgmmaGateUpArgs& a, const WgmmaDownArgs& d, cudaStream_t stream);

}  // namespace hpc::moe
