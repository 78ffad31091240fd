// EXPERIMENT 19 (measurement only, never landed): per-CTA timestamps of the decode kernels, to find where the
// ~9 us of fixed cost inside the attention kernel goes (bench/research/decode_8_1_bandwidth.md). Compiled in when
// decode.h defines HPC_DECODE_TRACE. Thread 0 of each CTA writes %globaltimer (ns, GPU-wide clock) at fixed
// points and clock64 (its SM's cycles) at entry and exit; the host reads them back (DecodeTraceRead).
#pragma once

#include <cstdint>

namespace hpc::attention {

constexpr int kTraceCtas = 2048;
// Attention CTA fields: 0 entry, 1 after PdlWait, 2 first piece located (plan read), 3 first K/V tile in shared
// memory, 4 last tile computed, 5 exit (globaltimer ns); 6 / 7 clock64 at entry / exit; 8 tiles computed; 9 smid.
// Combine CTA (blockIdx.y == 0): 0 entry, 1 after its PdlWait (0 when it left without waiting), 5 exit.
// Plan kernel (block 0): 0 entry, 5 exit.
constexpr int kTraceFields = 10;
enum TraceKernel { kTraceAttention = 0, kTraceCombine = 1, kTracePlan = 2, kTraceKernels = 3 };

__device__ unsigned long long g_decode_trace[kTraceKernels * kTraceCtas * kTraceFields];

__device__ __forceinline__ unsigned long long TraceGlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned long long* TraceSlot(int kernel, int field) {
  return g_decode_trace + (static_cast<int64_t>(kernel) * kTraceCtas + blockIdx.x) * kTraceFields + field;
}

__device__ __forceinline__ void TraceTime(int kernel, int field) {
  if (threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x < kTraceCtas) *TraceSlot(kernel, field) = TraceGlobalTimer();
}

__device__ __forceinline__ void TraceValue(int kernel, int field, unsigned long long v) {
  if (threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x < kTraceCtas) *TraceSlot(kernel, field) = v;
}

__device__ __forceinline__ unsigned SmId() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

}  // namespace hpc::attention
