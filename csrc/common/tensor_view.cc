#include "csrc/common/tensor_view.h"

namespace hpc {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kF64: return "float64";
    case DType::kI8: return "int8";
    case DType::kI16: return "int16";
    case DType::kU16: return "uint16";
    case DType::kU32: return "uint32";
    case DType::kU64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kF8E5M2: return "float8_e5m2";
    default: return "an unsupported dtype";
  }
}

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16: return 2;
    case DType::kF8E4M3: case DType::kU8: case DType::kI8: case DType::kBool: case DType::kF8E5M2: return 1;
    case DType::kI64: case DType::kF64: case DType::kU64: return 8;
    default: return 0;
  }
}

int64_t TensorView::numel() const {
  if (!present()) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::contiguous() const {
  if (numel() == 0) return true;  // no element to address: any strides will do (e.g. a T=0 slice)
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView DenseView(void* data, DType dtype, DeviceKind device, int device_id, const int64_t* dims, int rank) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_id = device_id;
  t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = dims[i];
    t.strides[i] = stride;
    stride *= dims[i];
  }
  return t;
}

namespace {
std::string DimsString(const int64_t* dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}
}  // namespace

std::string ShapeString(const TensorView& t) { return t.present() ? DimsString(t.shape, t.rank) : "absent"; }
std::string StridesString(const TensorView& t) { return t.present() ? DimsString(t.strides, t.rank) : "absent"; }

}  // namespace hpc
