// GPU self-check of csrc/common/fp8_scale.cuh: every float bit pattern through Fp8ScaleOfAmax,
// QuantMultiplierNoCall and Fp8RowScaleOfAmax against the IEEE float divisions they replace (the GPU test calls
// it; the CPU has no rcp.approx to check the real seeds with).
#pragma once

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc {

struct Fp8ScaleCheckResult {
  uint64_t scale_mismatches = 0;       // Fp8ScaleOfAmax(x) != x / 448 (NaN == NaN)
  uint64_t multiplier_mismatches = 0;  // QuantMultiplierNoCall(x) != QuantMultiplier(x)
  uint64_t row_mismatches = 0;         // Fp8RowScaleOfAmax(x) != {x / 448, QuantMultiplier(x / 448)}
};

// Synchronous: allocates 24 bytes on `device`, runs one kernel over all 2^32 patterns, frees.
Status Fp8ScaleSelfCheck(int device, Fp8ScaleCheckResult* result);

}  // namespace hpc
