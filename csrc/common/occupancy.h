// Per-kernel launch facts the launchers need once, cached for the process (never a driver query on the hot path
// after a kernel's first call): the raised dynamic shared-memory limit (per device) and the resident CTAs per SM.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "csrc/common/launch.cuh"
#include "csrc/common/status.h"

namespace hpc {

// Raises `fn`'s dynamic shared-memory limit to `bytes` on the current device (once per kernel and device: pass the
// most any launch of `fn` will ask for, not this launch's size -- a later, larger launch fails with "invalid
// argument"). The attribute belongs to the kernel's instance in one device's context, so a process driving several
// GPUs (JAX shard_map, torch on cuda:1 after cuda:0) sets it on each. `what` names the op in errors.
inline Status AllowDynamicSmem(const void* fn, int bytes, const char* what) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), what));
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({fn, device})) return Status::Ok();
  HPC_RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what));
  done.insert({fn, device});
  return Status::Ok();
}

// Resident CTAs of `fn` per SM at `threads` threads and `smem` dynamic shared bytes (occupancy API, once per
// kernel: all the GPUs we run on are one architecture). Call AllowDynamicSmem first when smem > 48 KB. A kernel
// that does not fit at all is an internal error, not a silent grid of zero.
inline Status ResidentCtasPerSm(const void* fn, int threads, int smem, const char* what, int* per_sm) {
  static std::mutex mu;
  static std::unordered_map<const void*, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(fn);
  if (it == cache.end()) {
    int n = 0;
    HPC_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, smem), what));
    if (n < 1) return Status::Internal(std::string(what) + ": kernel does not fit on an SM");
    it = cache.emplace(fn, n).first;
  }
  *per_sm = it->second;
  return Status::Ok();
}

}  // namespace hpc
