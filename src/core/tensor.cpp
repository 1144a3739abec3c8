#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/device_runtime.h"

namespace megatron {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// ---- Storage ----

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter,
                 std::shared_ptr<void> keep_alive)
    : data_(data),
      bytes_(bytes),
      device_(device),
      deleter_(std::move(deleter)),
      keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  void* p = device_allocate(bytes, device);
  return std::shared_ptr<Storage>(new Storage(
      p, bytes, device, [device](void* q) { device_free(q, device); }, nullptr));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device, nullptr, std::move(keep_alive)));
}

// ---- Tensor ----

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides,
               DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      dtype_(dtype) {
  MT_CHECK(shape_.size() == strides_.size(), "shape ", shape_str(shape_), " and strides ",
           shape_str(strides_), " differ in rank");
  for (int64_t d : shape_) MT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape_));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::allocate(size_t(shape_numel(shape)) * dtype_size(dtype), device);
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  zero_bytes(t.raw_data(), device, t.nbytes());
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::borrow(data, size_t(shape_numel(shape)) * dtype_size(dtype), device);
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  MT_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for ", describe());
  return shape_[d];
}

int64_t Tensor::stride(int64_t d) const {
  if (d < 0) d += dim();
  MT_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for ", describe());
  return strides_[d];
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  MT_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  MT_CHECK(is_contiguous(), "view of a non-contiguous tensor ", describe());
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      MT_CHECK(infer < 0, "view: more than one -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known > 0 && numel() % known == 0, "view: cannot infer ", shape_str(shape), " from ",
             describe());
    s[infer] = numel() / known;
  }
  MT_CHECK(shape_numel(s) == numel(), "view: ", shape_str(shape), " has ", shape_numel(s),
           " elements, tensor ", describe(), " has ", numel());
  return Tensor(storage_, offset_, s, contiguous_strides(s), dtype_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  if (d < 0) d += dim();
  MT_CHECK(d >= 0 && d < dim(), "slice: dimension ", d, " out of range for ", describe());
  MT_CHECK(0 <= start && start <= end && end <= shape_[d], "slice [", start, ", ", end,
           ") out of range for dimension ", d, " of ", describe());
  Shape s = shape_;
  s[d] = end - start;
  return Tensor(storage_, offset_ + start * strides_[d], s, strides_, dtype_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (d < 0) d += dim();
  MT_CHECK(d >= 0 && d < dim(), "select: dimension ", d, " out of range for ", describe());
  MT_CHECK(index >= 0 && index < shape_[d], "select: index ", index, " out of range for ",
           describe());
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_ + index * strides_[d], s, st, dtype_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (d0 < 0) d0 += dim();
  if (d1 < 0) d1 += dim();
  MT_CHECK(d0 >= 0 && d0 < dim() && d1 >= 0 && d1 < dim(), "transpose(", d0, ", ", d1,
           ") out of range for ", describe());
  Shape s = shape_, st = strides_;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor(storage_, offset_, s, st, dtype_);
}

Tensor Tensor::as_dtype(DType dtype) const {
  MT_CHECK(dtype_size(dtype) == dtype_size(dtype_), "as_dtype: ", dtype_name(dtype_), " and ",
           dtype_name(dtype), " differ in size");
  return Tensor(storage_, offset_, shape_, strides_, dtype);
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  MT_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: ", src.describe(), " into ",
           describe());
  if (is_contiguous() && src.is_contiguous()) {
    copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
    return;
  }
  MT_CHECK(device().is_cpu() && src.device().is_cpu(), "copy_from: ", src.describe(), " on ",
           src.device().str(), " into ", describe(), " on ", device().str(),
           ": copies that involve a GPU need contiguous tensors (use kernels::copy for strided "
           "copies on one device)");
  const size_t esize = dtype_size(dtype_);
  // General strided copy: walk the index space in row-major order.
  const int64_t n = numel(), nd = dim();
  std::vector<int64_t> idx(nd, 0);
  char* dst_base = static_cast<char*>(raw_data());
  const char* src_base = static_cast<const char*>(src.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t od = 0, os = 0;
    for (int64_t k = 0; k < nd; ++k) {
      od += idx[k] * strides_[k];
      os += idx[k] * src.strides_[k];
    }
    std::memcpy(dst_base + od * esize, src_base + os * esize, esize);
    for (int64_t k = nd - 1; k >= 0; --k) {
      if (++idx[k] < shape_[k]) break;
      idx[k] = 0;
    }
  }
}

Tensor Tensor::to(Device target) const {
  if (!defined() || device() == target) return *this;
  const Tensor src = is_contiguous() ? *this : clone();
  Tensor out = empty(shape_, dtype_, target);
  out.copy_from(src);
  return out;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) +
         (is_contiguous() ? "" : " (strided)");
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  MT_CHECK(t.shape() == expected, what, " has shape ", shape_str(t.shape()), ", expected ",
           shape_str(expected));
}

void check_dtype(const Tensor& t, DType expected, const char* what) {
  MT_CHECK(t.dtype() == expected, what, " has dtype ", dtype_name(t.dtype()), ", expected ",
           dtype_name(expected));
}

void check_contiguous(const Tensor& t, const char* what) {
  MT_CHECK(t.is_contiguous(), what, " must be contiguous, got ", t.describe());
}

}  // namespace megatron
