// Kernel launch helpers for .cu files: one place that knows how we launch (cudaLaunchKernelEx, with the
// Programmatic Dependent Launch attribute so a kernel may start while its predecessor drains) and how a CUDA
// error becomes a Status.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "csrc/common/arch.h"
#include "csrc/common/status.h"

namespace hpc {

inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string("hpc_xla: ") + what + ": " + cudaGetErrorString(err));
}

// Launches `kernel` on `stream` in clusters of `cluster_x` CTAs along x (1: no cluster attribute; grid.x must be a
// multiple of it). Kernels launched this way call PdlWait() before touching inputs that an earlier kernel in the
// stream may still be writing; without the PDL attribute PdlWait() is a no-op.
template <typename... KernelArgs, typename... Args>
Status LaunchCluster(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                     unsigned cluster_x, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (PdlEnabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  config.attrs = attr;
  config.numAttrs = n;
  return CudaStatus(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), name);
}

// Launches `kernel` on `stream` without clusters (see LaunchCluster).
template <typename... KernelArgs, typename... Args>
Status Launch(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
              cudaStream_t stream, Args&&... args) {
  return LaunchCluster(name, kernel, grid, block, smem_bytes, 1u, stream, std::forward<Args>(args)...);
}

// Device side of PDL (sm_90): wait for the previous grid's memory to be visible / let the next grid start.
__device__ __forceinline__ void PdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void PdlLaunchDependents() { asm volatile("griddepcontrol.launch_dependents;"); }

}  // namespace hpc
