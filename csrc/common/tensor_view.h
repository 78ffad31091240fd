// TensorView: a non-owning description of one operand (pointer, dtype, shape, strides in elements, device).
// Both bindings build these (XLA buffers are dense row-major; torch tensors may be strided views), and every
// csrc launcher takes a struct of them. An optional operand that was not given has rank -1 (present()==false).
#pragma once

#include <cstdint>
#include <string>

namespace hpc {

// kF64 and after: dtypes no op takes, named so that an argument of one is refused with its name (the JAX face hands
// every XLA buffer over; the torch bridge refuses others itself).
enum class DType : uint8_t { kInvalid = 0, kF32, kF16, kBF16, kF8E4M3, kI32, kI64, kU8,
                             kF64, kI8, kI16, kU16, kU32, kU64, kBool, kF8E5M2 };

const char* DTypeName(DType dtype);
int DTypeBytes(DType dtype);

enum class DeviceKind : uint8_t { kCpu = 0, kCuda };

constexpr int kMaxRank = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kInvalid;
  DeviceKind device = DeviceKind::kCpu;
  int device_id = 0;
  int rank = -1;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  bool present() const { return rank >= 0; }
  int64_t numel() const;
  bool contiguous() const;
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// A dense row-major view (what XLA hands a custom call). rank <= kMaxRank.
TensorView DenseView(void* data, DType dtype, DeviceKind device, int device_id, const int64_t* dims, int rank);

std::string ShapeString(const TensorView& t);    // "[4, 8, 128]" or "absent"
std::string StridesString(const TensorView& t);  // in elements, same format

}  // namespace hpc
