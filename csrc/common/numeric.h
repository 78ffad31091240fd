// Scalar conversions shared by kernels and the CPU reference, so both round the same way: bf16/fp16 round to
// nearest even, float8_e4m3fn saturates to +-448 (NaN stays NaN). cuda_{bf16,fp16,fp8}.h work in host code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#ifdef __CUDACC__
#define HPC_HD __host__ __device__ __forceinline__
#else
#define HPC_HD inline
#endif

namespace hpc {

constexpr float kFp8E4M3Max = 448.0f;

HPC_HD float ToFloat(float x) { return x; }
HPC_HD float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
HPC_HD float ToFloat(__half x) { return __half2float(x); }

template <typename T>
HPC_HD T FromFloat(float x);
template <>
HPC_HD float FromFloat<float>(float x) { return x; }
template <>
HPC_HD __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
HPC_HD __half FromFloat<__half>(float x) { return __float2half_rn(x); }

HPC_HD uint8_t FloatToE4M3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
HPC_HD float E4M3ToFloat(uint8_t x) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x), __NV_E4M3);
  return __half2float(__half(h));
}

// x / scale quantized to e4m3, computed as x * (1 / scale) (one division per row, not per element; the CUDA
// kernels do the same); a zero scale (all-zero row) gives zeros instead of NaN.
HPC_HD float QuantMultiplier(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }
HPC_HD uint8_t QuantizeE4M3(float x, float scale) { return FloatToE4M3(x * QuantMultiplier(scale)); }

}  // namespace hpc
