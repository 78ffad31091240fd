#include "csrc/common/device_check.h"

#include <string>
#include <vector>

#include "csrc/common/check.h"

namespace hpc {

Status CheckScalesOnDevice(const char* op, const char* name, const TensorView& scale, cudaStream_t stream,
                           bool zero_ok) {
  if (!scale.present() || scale.numel() == 0) return Status::Ok();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const std::string what = std::string(op) + " check";
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) return Status::Internal(what + ": stream query failed");
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();
  std::vector<float> host(static_cast<size_t>(scale.numel()));
  cudaError_t err = cudaMemcpyAsync(host.data(), scale.data, host.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                    stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return Status::Internal(what + ": " + cudaGetErrorString(err));
  TensorView view = scale;
  view.data = host.data();
  view.device = DeviceKind::kCpu;
  Status s = ArgCheck(op).PositiveFiniteScales(name, view, zero_ok);
  if (s.ok()) return s;
  return Status::InvalidArgument(s.message() + " (HPC_XLA_CHECK)");
}

}  // namespace hpc
