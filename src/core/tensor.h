// Tensor: a strided view of typed elements in a shared, reference-counted Storage.
//
// Ownership: Storage owns its bytes (RAII); a Tensor holds a shared_ptr to it, so views,
// slices and reshapes share memory and keep it alive. No Tensor operation copies unless its
// name says so (clone, copy_from). Shapes are row-major; strides are in elements.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace megatron {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

// A block of memory on one device (core/device_runtime.h allocates it). Either owned (freed
// with its deleter) or borrowed (no deleter: the memory outlives every Storage pointing at it,
// e.g. an mmap or an arena block that `keep_alive` pins).
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device = Device::CPU);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter,
          std::shared_ptr<void> keep_alive);
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
  std::shared_ptr<void> keep_alive_;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype);

  // New contiguous tensors on `device`. empty() leaves memory uninitialised (64-byte aligned).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  // A contiguous tensor over memory someone else owns (not freed by the tensor).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::CPU);
  // A contiguous f32/i32/... tensor holding a copy of `values`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Address of element 0 of this view, on the tensor's device: only kernels of that device
  // may dereference it.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    MT_CHECK(dtype_of<T>() == dtype_, "tensor has dtype ", dtype_name(dtype_), ", accessed as ",
             dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }

  // Views (no copy).
  Tensor view(const Shape& shape) const;  // contiguous only; one dimension may be -1
  Tensor flatten() const { return view({numel()}); }
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int64_t dim, int64_t index) const;              // drops dim
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor as_dtype(DType dtype) const;  // reinterpret same-sized elements (e.g. bf16 <-> u16)

  // Copies.
  Tensor clone() const;  // contiguous copy, same dtype and device
  // Same shape and dtype. Host to host: any strides. Whenever a GPU is involved both tensors
  // must be contiguous (kernels::copy does strided copies on any device).
  void copy_from(const Tensor& src);
  // This tensor on `device`: itself when it is there already, else a contiguous copy.
  Tensor to(Device device) const;
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous host copy of the elements, same dtype

  std::string describe() const;  // "f32[2, 3] (contiguous)"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
};

Shape contiguous_strides(const Shape& shape);

// Element `index` of a contiguous tensor (row-major over all dimensions), read back to the
// host: one element crosses from a GPU. For error messages and logged scalars, not for loops.
template <typename T>
T element_value(const Tensor& t, int64_t index);

// MT_CHECK helpers used by every kernel.
void check_shape(const Tensor& t, const Shape& expected, const char* what);
void check_dtype(const Tensor& t, DType expected, const char* what);
void check_contiguous(const Tensor& t, const char* what);

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  MT_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
T element_value(const Tensor& t, int64_t index) {
  MT_CHECK(index >= 0 && index < t.numel(), "element ", index, " out of range for ", t.describe());
  return t.flatten().slice(0, index, index + 1).to_vector<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(Device::CPU);
  if (!c.is_contiguous()) c = c.clone();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + numel());
}

}  // namespace megatron
