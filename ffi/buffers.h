// XLA FFI <-> csrc glue shared by every handler: buffers become TensorViews, Status becomes ffi::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"
#include "xla/ffi/api/ffi.h"

namespace hpc::ffi_glue {

namespace ffi = ::xla::ffi;

inline DType FromXla(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return DType::kF32;
    case ffi::DataType::F16: return DType::kF16;
    case ffi::DataType::BF16: return DType::kBF16;
    case ffi::DataType::F8E4M3FN: return DType::kF8E4M3;
    case ffi::DataType::S32: return DType::kI32;
    case ffi::DataType::S64: return DType::kI64;
    case ffi::DataType::U8: return DType::kU8;
    // named only to be refused by name (no op takes them)
    case ffi::DataType::F64: return DType::kF64;
    case ffi::DataType::S8: return DType::kI8;
    case ffi::DataType::S16: return DType::kI16;
    case ffi::DataType::U16: return DType::kU16;
    case ffi::DataType::U32: return DType::kU32;
    case ffi::DataType::U64: return DType::kU64;
    case ffi::DataType::PRED: return DType::kBool;
    case ffi::DataType::F8E5M2: return DType::kF8E5M2;
    default: return DType::kInvalid;
  }
}

// XLA buffers are dense row-major. `optional` buffers use shape (0,) for "not given" (see hpc_xla/jax/_ffi.py).
inline TensorView View(const ffi::AnyBuffer& b, DeviceKind device, int device_id, bool optional = false) {
  const auto dims = b.dimensions();
  if (optional && dims.size() == 1 && dims[0] == 0) return TensorView{};
  return DenseView(b.untyped_data(), FromXla(b.element_type()), device, device_id, dims.begin(),
                   static_cast<int>(dims.size()));
}

// The context every CUDA handler binds first: the stream to launch on and the device ordinal.
inline auto CudaBinding() {
  return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>();
}

inline ffi::Error ToError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return ffi::Error::Success();
    case StatusCode::kInvalidArgument: return ffi::Error(ffi::ErrorCode::kInvalidArgument, s.message());
    case StatusCode::kUnsupported: return ffi::Error(ffi::ErrorCode::kUnimplemented, s.message());
    default: return ffi::Error(ffi::ErrorCode::kInternal, s.message());
  }
}

}  // namespace hpc::ffi_glue
