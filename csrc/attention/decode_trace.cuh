// EXPERIMENT 49 (measurement only, never landed): where a decode attention CTA's cycles go, by phase. Thread 0 of
// each CTA reads clock64 at each phase boundary and adds the delta to its phase's sum in shared memory; at exit it
// writes the sums, counts, total cycles and SM id to g_decode_trace (read back by tools/decode_trace.py through
// ext().decode_trace_read). The barriers inside a phase make thread 0's view the CTA's. Compiled in when decode.h
// defines HPC_DECODE_TRACE.
#pragma once

#include <cstdint>

namespace hpc::attention {

constexpr int kTraceCtas = 2048;
// copy: copy_next (K/V copies + next block ids) and commit; wait: the ring wait + barrier; compute: ComputeTile +
// its end barrier; piece_start: st reset, q load, q fragments + barriers; finish: FinishPiece; advance: comp.Advance
// (the next piece from the plan); lead: entry to the loop (PdlWait, plan lookup, the ring's first copies).
enum TraceField {
  kTrCopy = 0, kTrWait, kTrCompute, kTrPieceStart, kTrFinish, kTrAdvance, kTrLead, kTrTiles, kTrPieces, kTrTotal,
  kTrSm, kTrFinPrep, kTrFinMerge, kTrFinStore, kTraceFields  // (EXPERIMENT 56: finish = prep + merge + store)
};

__device__ unsigned long long g_decode_trace[kTraceCtas * kTraceFields];
__shared__ unsigned long long g_trace_acc[kTraceFields];  // the CTA's sums (FinishPiece adds its sub-phases)

// Thread 0's phase clock. Add(field): the cycles since the last boundary go to `field`.
struct PhaseClock {
  unsigned long long* acc;  // shared memory, kTraceFields sums
  long long last;
  __device__ __forceinline__ void Start(unsigned long long* shared_acc) {
    acc = shared_acc;
    if (threadIdx.x < kTraceFields) acc[threadIdx.x] = 0;
    __syncthreads();
    last = clock64();
  }
  __device__ __forceinline__ void Add(int field) {
    const long long now = clock64();
    if (threadIdx.x == 0) acc[field] += static_cast<unsigned long long>(now - last);
    last = now;
  }
  __device__ __forceinline__ void Count(int field) {
    if (threadIdx.x == 0) acc[field] += 1;
  }
  __device__ __forceinline__ void Write(long long entry) {
    if (threadIdx.x != 0 || blockIdx.x >= kTraceCtas) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    acc[kTrTotal] = static_cast<unsigned long long>(clock64() - entry);
    acc[kTrSm] = sm;
    for (int f = 0; f < kTraceFields; ++f) g_decode_trace[blockIdx.x * kTraceFields + f] = acc[f];
  }
};

}  // namespace hpc::attention
