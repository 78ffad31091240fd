// EXPERIMENT 42 (measurement only, never landed): per-CTA timestamps of the single-token stream layer -- the wgmma
// gate-up and the stream down kernel -- to see where Qwen3 fp8 T=1's ~19 us goes under graph replay (the weights'
// floor is ~8.8 us; every structural change so far, one kernel included, landed at 18.6-19.3 us on the H200).
// Compiled in when fused_moe.h defines HPC_MOE_TRACE; modelled on decode's experiment 19 (commit 5c2ece2).
// Thread 0 of each CTA writes %globaltimer (ns, GPU-wide) at fixed points; the host reads the arrays back. Each
// call overwrites the slots it reaches, so after a graph replay they hold the graph's last call.
#pragma once

#ifdef HPC_MOE_TRACE
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "csrc/common/status.h"

namespace hpc::moe::trace {

constexpr int kCtas = 1024;
constexpr int kFields = 8;
// Gate-up (wgmma) fields: 0 entry, 1 after PdlWait, 2 weight copies issued, 3 first K group landed, 4 last K group's
// wgmma done, 5 exit (every CTA), 6 kind (1 left at the id check, 2 cluster rank > 0 after the reduce, 3 epilogue),
// 7 smid. Down fields: 0 entry, 1 hit list and sum factors built, 2 after PdlWait, 3 jobs done, 5 exit, 6 experts
// hit, 7 smid.
// One array per translation unit (static: no relocatable device code): each kernel's file owns its own.
static __device__ unsigned long long g_trace[kCtas * kFields];

__device__ __forceinline__ void Time(int field) {
  if (threadIdx.x == 0 && blockIdx.x < kCtas) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_trace[blockIdx.x * kFields + field] = t;
  }
}

__device__ __forceinline__ void Value(int field, unsigned long long v) {
  if (threadIdx.x == 0 && blockIdx.x < kCtas) g_trace[blockIdx.x * kFields + field] = v;
}

__device__ __forceinline__ unsigned long long SmId() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// This translation unit's array: zeroed (reset) or synchronized and copied out.
static inline Status Access(bool reset, std::vector<uint64_t>* out) {
  void* addr = nullptr;
  if (cudaGetSymbolAddress(&addr, g_trace) != cudaSuccess) return Status::Internal("moe trace: no symbol");
  if (reset) {
    return cudaMemset(addr, 0, sizeof(g_trace)) == cudaSuccess ? Status::Ok() : Status::Internal("moe trace reset");
  }
  out->resize(sizeof(g_trace) / sizeof(uint64_t));
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(out->data(), addr, sizeof(g_trace), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return Status::Internal("moe trace read");
  }
  return Status::Ok();
}

}  // namespace hpc::moe::trace

#define HPC_MOE_TRACE_TIME(field) ::hpc::moe::trace::Time(field)
#define HPC_MOE_TRACE_VALUE(field, v) ::hpc::moe::trace::Value(field, v)
#else
#define HPC_MOE_TRACE_TIME(field) ((void)0)
#define HPC_MOE_TRACE_VALUE(field, v) ((void)0)
#endif
