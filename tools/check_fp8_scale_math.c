// CPU check of csrc/common/fp8_scale.cuh's arithmetic on every float (~1 min on one core):
//   gcc -O2 -ffp-contract=off -o /tmp/check_fp8_scale_math tools/check_fp8_scale_math.c -lm && /tmp/check_fp8_scale_math
// The same double-precision FMA steps as the device code, compared bit for bit with the IEEE float division. The
// device seeds its Newton steps with rcp.approx.f64, which the CPU does not have: here the seed is the exact
// reciprocal perturbed by 0 and +-2^-20 and +-2^-14 relative (all must pass), and +-2^-11 (expected to fail: shows
// where the margin ends). Fp8RowScaleOfAmax's single-precision quotient (three float operations, no seed) is checked
// exactly: equal to the division for every float from 2^-120 up (it uses it from 2^-116), and the lowest float where
// it is not is printed. Its reciprocal (nvcc's own fast-path instructions for 1.0f / s) needs the hardware seed:
// Fp8ScaleSelfCheck (csrc/common/fp8_scale_check.cu) runs the real thing on the GPU.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static float FloatOf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t BitsOf(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int Same(float a, float b) { return BitsOf(a) == BitsOf(b) || (isnan(a) && isnan(b)); }

static float ScaleOfAmax(float amax) {  // Fp8ScaleOfAmax
  const double k = 1.0 / 448.0, a = amax;
  const double q0 = a * k;
  const double r = fma(-q0, 448.0, a);
  const float q = (float)fma(r, k, q0);
  return isinf(amax) || amax == 0.0f ? amax : q;
}

static float ScaleOfAmaxSingle(float a) {  // Fp8RowScaleOfAmax's quotient (a >= 2^-116 there)
  const float k = 1.0f / 448.0f;
  const float q0 = a * k;
  return fmaf(fmaf(-q0, 448.0f, a), k, q0);
}

static float Multiplier(float scale, double seed_error) {  // QuantMultiplierNoCall with a perturbed seed
  const double s = scale;
  double y = (1.0 / s) * (1.0 + seed_error);
  y = fma(y, fma(-s, y, 1.0), y);
  y = fma(y, fma(-s, y, 1.0), y);
  return scale > 0.0f && !isinf(scale) ? (float)y : 0.0f;
}

int main(void) {
  const double errors[] = {0.0, 0x1p-20, -0x1p-20, 0x1p-14, -0x1p-14, 0x1p-11, -0x1p-11};
  enum { kErrors = sizeof(errors) / sizeof(errors[0]), kMustPass = 5 };
  uint64_t scale_bad = 0, mul_bad[kErrors] = {0}, single_bad = 0;
  uint32_t single_highest_bad = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; ++u) {
    const float x = FloatOf((uint32_t)u);
    scale_bad += !Same(ScaleOfAmax(x), x / 448.0f);
    if (u < 0x7f800000u && !Same(ScaleOfAmaxSingle(x), x / 448.0f)) {  // +0 to the largest float
      ++single_bad;
      single_highest_bad = (uint32_t)u;  // u runs upwards
    }
    const float want = x > 0.0f ? 1.0f / x : 0.0f;  // QuantMultiplier
    for (int e = 0; e < kErrors; ++e) mul_bad[e] += !Same(Multiplier(x, errors[e]), want);
  }
  int failed = scale_bad != 0;
  printf("amax / 448: %llu mismatches\n", (unsigned long long)scale_bad);
  printf("amax / 448 in single precision: %llu mismatches, the highest at %a (must be below 2^-120)\n",
         (unsigned long long)single_bad, FloatOf(single_highest_bad));
  if (single_bad != 0 && FloatOf(single_highest_bad) >= 0x1p-120f) failed = 1;
  for (int e = 0; e < kErrors; ++e) {
    printf("1 / scale, seed error %+g: %llu mismatches%s\n", errors[e], (unsigned long long)mul_bad[e],
           e < kMustPass ? "" : " (beyond the margin)");
    if (e < kMustPass && mul_bad[e] != 0) failed = 1;
  }
  return failed;
}
