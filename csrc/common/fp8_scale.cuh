// Per-row fp8 scale arithmetic without a subroutine call: amax / 448 and QuantMultiplier(scale) (= 1 / scale),
// bit for bit what the IEEE float division gives (the CPU reference's rounding).
//
// Why: nvcc compiles a float division to an inline fast path plus a CALL to a slow-path subroutine for the
// operands it cannot prove in range. The call's ABI makes ptxas save live registers around it, so a kernel that
// divides inside an unrolled per-row loop spills there: rope_norm's 4-row fp8-q kernels stored 32-36 B and
// reloaded 80-88 B per thread on the path every row takes (the spills sit around the two calls per row in the
// SASS), while the same kernels without fp8 q did not spill at all. (Experiment 29, staged for its first GPU run, uses
// them there; main's kernels still divide.)
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

}  // namespace hpc
