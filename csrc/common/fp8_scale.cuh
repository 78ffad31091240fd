// Per-row fp8 scale arithmetic without a subroutine call: amax / 448 and QuantMultiplier(scale) (= 1 / scale),
// bit for bit what the IEEE float division gives (the CPU reference's rounding).
//
// Why: nvcc compiles a float division to an inline fast path plus a CALL to a slow-path subroutine for the
// operands it cannot prove in range. The call's ABI makes ptxas save live registers around it, so a kernel that
// divides inside an unrolled per-row loop spills there: rope_norm's 4-row fp8-q kernels stored 32-36 B and
// reloaded 80-88 B per thread on the path every row takes (the spills sit around the two calls per row in the
// SASS), while the same kernels without fp8 q did not spill at all (experiment 29, landed in session 31, took them
// out of that loop; Fp8RowScaleOfAmax below now takes the double chain off its common path too).
//
// How, in double precision, with FMAs only:
//   Fp8ScaleOfAmax: q0 = a * RN(1/448), r = a - 448 q0 (exact by FMA), q = q0 + r RN(1/448) is the correctly
//     rounded double quotient (Markstein: a faithful q0 and a correctly rounded reciprocal), and rounding it to
//     float gives the correctly rounded float quotient (53 >= 2 * 24 + 2: double rounding is innocuous for
//     division). Every float is a normal double and so is a / 448, so no range check is needed; inf and -0 are
//     passed through.
//   QuantMultiplierNoCall: two Newton steps y += y (1 - s y) from the hardware's approximate double reciprocal
//     take its error from < 2^-14 to < 2^-52 relative; 1 / s of a float s is never closer than ~2^-49 relative
//     to a float rounding midpoint, so rounding y to float gives RN(1 / s). s <= 0 or NaN -> 0, inf -> 0.
// Checked against the float division on every float: tools/check_fp8_scale_math.c on the CPU (same algorithms,
// IEEE double FMA; the seed perturbed by up to +-2^-14) and Fp8ScaleSelfCheck (csrc/common/fp8_scale_check.cu)
// on the GPU with the real seed.
#pragma once

#include <cstdint>

#include "csrc/common/numeric.h"

namespace hpc {

__device__ __forceinline__ float Fp8ScaleOfAmax(float amax) {
  constexpr double kRcp = 1.0 / static_cast<double>(kFp8E4M3Max);  // RN(1/448), folded at compile time
  const double a = amax;
  const double q0 = a * kRcp;
  const double r = fma(-q0, static_cast<double>(kFp8E4M3Max), a);
  const float q = static_cast<float>(fma(r, kRcp, q0));
  return isinf(amax) || amax == 0.0f ? amax : q;  // inf: r is NaN; -0: the FMAs give +0
}

__device__ __forceinline__ float QuantMultiplierNoCall(float scale) {
  const double s = scale;
  double y;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(s));
  y = fma(y, fma(-s, y, 1.0), y);
  y = fma(y, fma(-s, y, 1.0), y);
  return scale > 0.0f && !isinf(scale) ? static_cast<float>(y) : 0.0f;
}

// Both of a row's numbers at once, scale = amax / 448 and its multiplier 1 / scale, in single precision where that
// is exact and through the double-precision helpers above elsewhere. Why: the double chain (two conversions to
// double, MUFU.RCP64H, six DFMAs, two conversions back: ~130 cycles) sat on every fp8 q row's critical path in
// rope_norm, whose fp8 rows are latency-bound (they take as long as the bf16 rows for 25% fewer bytes). Here, for
// amax in [2^-116, FLT_MAX]:
//   scale: q0 = RN(a RN(1/448)), r = a - 448 q0 (exact by FMA), RN(q0 + r RN(1/448)). Equal to the float division
//     for every float a >= 2^-120 (tools/check_fp8_scale_math.c runs all of them; below 2^-120 the quotient nears
//     the subnormals and the correction step is not exact), so [2^-116, ...) keeps a margin of four binades.
//   multiplier: the seed rcp.approx.ftz.f32 (MUFU.RCP) and one Newton step by FMA, e = 1 - s y, y + y e -- the
//     instructions nvcc emits for the IEEE reciprocal (rcp.rn.f32, 1.0f / s) on its fast path, which it takes for
//     every s whose exponent field is in [1, 252]; scale's is in [3, 246] here. Fp8ScaleSelfCheck compares both
//     numbers with the float divisions on every float on the GPU.
struct Fp8RowScale {
  float scale, mul;
};

// amax in [2^-116, FLT_MAX] (and not negative): the single-precision pair is exact there.
__device__ __forceinline__ bool Fp8RowScaleIsFast(float amax) {
  constexpr uint32_t kLow = 0x05800000u;  // 2^-116
  return __float_as_uint(amax) - kLow < 0x7f800000u - kLow;
}

__device__ __forceinline__ Fp8RowScale Fp8RowScaleFast(float amax) {
  constexpr float kRcp = 1.0f / kFp8E4M3Max;  // RN(1/448)
  const float q0 = __fmul_rn(amax, kRcp);
  const float scale = __fmaf_rn(__fmaf_rn(-q0, kFp8E4M3Max, amax), kRcp, q0);
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(scale));
  return {scale, __fmaf_rn(y, __fmaf_rn(-scale, y, 1.0f), y)};
}

__device__ __forceinline__ Fp8RowScale Fp8RowScaleOfAmax(float amax) {
  if (Fp8RowScaleIsFast(amax)) return Fp8RowScaleFast(amax);
  const float scale = Fp8ScaleOfAmax(amax);
  return {scale, QuantMultiplierNoCall(scale)};
}

// N rows' pairs behind one range test (one branch, so the rows' chains can overlap): the fast forms when every
// amax is in range, else row by row.
template <int N>
__device__ __forceinline__ void Fp8RowScalesOfAmax(const float (&amax)[N], Fp8RowScale (&out)[N]) {
  bool fast = true;
#pragma unroll
  for (int i = 0; i < N; ++i) fast = fast && Fp8RowScaleIsFast(amax[i]);
  if (fast) {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = Fp8RowScaleFast(amax[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = Fp8RowScaleOfAmax(amax[i]);
  }
}

}  // namespace hpc
