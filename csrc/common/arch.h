// Device facts and process-wide switches, read once and cached (no driver queries on the hot path after the
// first call per device).
#pragma once

#include "csrc/common/status.h"

namespace hpc {

// Ok on compute capability 9.0 (our sm_90a SASS runs nowhere else); otherwise a clear Unsupported status:
// "hpc_xla kernels need compute capability 9.0 (Hopper), found 8.0 (NVIDIA A100...) on cuda:0".
Status CheckHopper(int device);

int MultiprocessorCount(int device);

// HPC_XLA_CHECK=1: launchers also validate data-dependent inputs (indices, lengths) on the GPU, synchronize,
// and report the first bad value. Debug only: it syncs, so it is skipped while a stream is being captured.
bool DeviceChecksEnabled();

// A boolean environment switch ("0"/"false"/"off" vs anything else), `fallback` when unset. Read it once.
bool EnvFlag(const char* name, bool fallback);
// An integer environment setting (std::atoi of its text), `fallback` when unset. Callers check the range.
int EnvInt(const char* name, int fallback);

// HPC_XLA_PDL=0 turns off Programmatic Dependent Launch (on by default).
bool PdlEnabled();

}  // namespace hpc
