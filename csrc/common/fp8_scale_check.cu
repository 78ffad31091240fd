// See fp8_scale_check.h.
#include <cuda_runtime.h>

#include "csrc/common/arch.h"
#include "csrc/common/fp8_scale.cuh"
#include "csrc/common/fp8_scale_check.h"
#include "csrc/common/launch.cuh"

namespace hpc {
namespace {

__device__ __forceinline__ bool SameBits(float a, float b) {
  return __float_as_uint(a) == __float_as_uint(b) || (isnan(a) && isnan(b));
}

__global__ void Fp8ScaleCheckKernel(unsigned long long* mismatches) {
  unsigned long long scale_bad = 0, mul_bad = 0, row_bad = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t u = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < (uint64_t{1} << 32);
       u += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(u));
    scale_bad += SameBits(Fp8ScaleOfAmax(x), x / kFp8E4M3Max) ? 0 : 1;
    mul_bad += SameBits(QuantMultiplierNoCall(x), QuantMultiplier(x)) ? 0 : 1;
    const float scale = x / kFp8E4M3Max;
    const Fp8RowScale row = Fp8RowScaleOfAmax(x);
    row_bad += SameBits(row.scale, scale) && SameBits(row.mul, QuantMultiplier(scale)) ? 0 : 1;
  }
  if (scale_bad != 0) atomicAdd(&mismatches[0], scale_bad);
  if (mul_bad != 0) atomicAdd(&mismatches[1], mul_bad);
  if (row_bad != 0) atomicAdd(&mismatches[2], row_bad);
}

Status RunCheck(Fp8ScaleCheckResult* result) {
  unsigned long long* counts = nullptr;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&counts, 3 * sizeof(unsigned long long)), "fp8 scale self-check"));
  unsigned long long host[3] = {0, 0, 0};
  Status s = CudaStatus(cudaMemset(counts, 0, sizeof(host)), "fp8 scale self-check");
  if (s.ok()) {
    Fp8ScaleCheckKernel<<<1024, 256>>>(counts);
    s = CudaStatus(cudaGetLastError(), "fp8 scale self-check launch");
  }
  if (s.ok()) s = CudaStatus(cudaMemcpy(host, counts, sizeof(host), cudaMemcpyDeviceToHost), "fp8 scale self-check");
  cudaFree(counts);
  result->scale_mismatches = host[0];
  result->multiplier_mismatches = host[1];
  result->row_mismatches = host[2];
  return s;
}

}  // namespace

Status Fp8ScaleSelfCheck(int device, Fp8ScaleCheckResult* result) {
  HPC_RETURN_IF_ERROR(CheckHopper(device));
  int previous = 0;  // the caller's (torch's) current device is put back
  HPC_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&previous), "fp8 scale self-check"));
  HPC_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "fp8 scale self-check"));
  const Status s = RunCheck(result);
  cudaSetDevice(previous);
  return s;
}

}  // namespace hpc
