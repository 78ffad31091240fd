#include "csrc/common/arch.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>

namespace hpc {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceFacts {
  int major = 0, minor = 0, sms = 0;
  char name[256] = {};
};

// Filled once per device; later calls read the cache. Races only duplicate the same query.
const DeviceFacts* Facts(int device, Status* status) {
  static DeviceFacts facts[kMaxDevices];
  static std::atomic<bool> ready[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) {
    *status = Status::Internal("hpc_xla: device ordinal " + std::to_string(device) + " out of range");
    return nullptr;
  }
  if (!ready[device].load(std::memory_order_acquire)) {
    DeviceFacts f;
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess) {
      *status = Status::Internal(std::string("hpc_xla: cannot query cuda:") + std::to_string(device) + ": " +
                                 cudaGetErrorString(err));
      return nullptr;
    }
    f.major = prop.major;
    f.minor = prop.minor;
    f.sms = prop.multiProcessorCount;
    std::snprintf(f.name, sizeof(f.name), "%s", prop.name);
    facts[device] = f;
    ready[device].store(true, std::memory_order_release);
  }
  return &facts[device];
}

}  // namespace

bool EnvFlag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 || std::strcmp(v, "off") == 0);
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoi(v);
}

Status CheckHopper(int device) {
  Status status;
  const DeviceFacts* f = Facts(device, &status);
  if (f == nullptr) return status;
  if (f->major == 9 && f->minor == 0) return Status::Ok();
  return Status::Unsupported("hpc_xla kernels need compute capability 9.0 (Hopper, sm_90a), found " +
                             std::to_string(f->major) + "." + std::to_string(f->minor) + " (" + f->name +
                             ") on cuda:" + std::to_string(device));
}

int MultiprocessorCount(int device) {
  Status status;
  const DeviceFacts* f = Facts(device, &status);
  return f ? f->sms : 0;
}

bool DeviceChecksEnabled() {
  static const bool enabled = EnvFlag("HPC_XLA_CHECK", false);
  return enabled;
}

bool PdlEnabled() {
  static const bool enabled = EnvFlag("HPC_XLA_PDL", true);
  return enabled;
}

}  // namespace hpc
