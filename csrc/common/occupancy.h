// Per-kernel launch facts the launchers need once, cached for the process (never a driver query on the hot path
// after a kernel's first call): the raised dynamic shared-memory limit (per device) and the resident CTAs per SM.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/status.h"

namespace hpc {

// Runs `set()` (a cudaFuncSetAttribute on `fn`) once per kernel and device (each setter's own lambda type keeps
// its own record of what is done). A function attribute belongs to the kernel's instance in one device's context, so a process
// driving several GPUs (JAX shard_map, torch on cuda:1 after cuda:0) sets it on each.
template <class Set>
Status OncePerKernelAndDevice(const void* fn, const char* what, Set set) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), what));
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({fn, device})) return Status::Ok();
  HPC_RETURN_IF_ERROR(CudaStatus(set(), what));
  done.insert({fn, device});
  return Status::Ok();
}

// Raises `fn`'s dynamic shared-memory limit to `bytes` on the current device (once per kernel and device: pass the
// most any launch of `fn` will ask for, not this launch's size -- a later, larger launch fails with "invalid
// argument"). `what` names the op in errors.
inline Status AllowDynamicSmem(const void* fn, int bytes, const char* what) {
  return OncePerKernelAndDevice(
      fn, what, [&] { return cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); });
}

// Asks for the largest shared-memory carveout for `fn` (once per kernel and device; HPC_XLA_CARVEOUT=0: no-op).
// Why: an SM's shared-memory / L1 split changes only while the SM is empty, so a small kernel the driver configures
// with a small carveout (ncu, session 48: the decode plan kernel ran at 64 KB, the attention kernel at 228 KB) can
// share no SM with the big-smem kernel before or after it in a PDL chain: its CTAs, and the next kernel's, wait for
// whole SMs to drain and be reconfigured instead of landing beside the running CTAs. Kernels given this hold no
// data in L1 worth keeping (they stream their inputs once).
inline Status PreferMaxSharedCarveout(const void* fn, const char* what) {
  if (!MatchedCarveoutEnabled()) return Status::Ok();
  return OncePerKernelAndDevice(fn, what, [&] {
    return cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  });
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
