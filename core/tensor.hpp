// Tensor: shape, dtype, device and a view into shared contiguous storage.
// A Tensor never owns a strided layout: views are {offset, shape} ranges of a
// flat buffer (how parameters, gradients and ZeRO shards are carved), always
// contiguous. Storage is released when the last view goes away. CPU storage
// goes through the accounting HostAllocator; cuda:N storage through
// core/device_memory.hpp (refused in builds without CUDA). data<T>() of a
// device tensor is a device pointer.
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/allocator.hpp"
#include "core/device.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace trident {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  MemCategory category = MemCategory::other;
  Device device;
  bool owned = true;  // false: borrowed memory (Tensor::borrow), never freed here
  Storage(size_t bytes, MemCategory cat, Device dev);
  Storage(void* borrowed, size_t bytes, Device dev);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, MemCategory cat, Device dev = {});
  static Tensor zeros(const Shape& shape, DType dtype, MemCategory cat, Device dev = {});
  // A view of memory owned elsewhere (not accounted, not freed): how the
  // model's raw buffers reach a Communicator. The owner keeps it alive.
  // Memory of the device allocator is recognised and tagged cuda:N.
  template <typename T>
  static Tensor borrow(T* data, int64_t n, Device dev = {}) {
    return borrow_raw(const_cast<std::remove_const_t<T>*>(data), n, dtype_of<std::remove_const_t<T>>(), dev);
  }
  static Tensor borrow_raw(void* data, int64_t n, DType dtype, Device dev = {});

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return storage_ ? shape_numel(shape_) : 0; }  // an undefined tensor holds nothing
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device{}; }
  bool defined() const { return storage_ != nullptr; }

  template <typename T>
  T* data() const {
    TRIDENT_CHECK(dtype_of<T>() == dtype_, "tensor has dtype {}, accessed as {}", dtype_name(dtype_),
                  dtype_name(dtype_of<T>()));
    return reinterpret_cast<T*>(raw());
  }
  void* raw() const { return static_cast<char*>(storage_->data) + offset_ * dtype_size(dtype_); }

  // A contiguous range [offset, offset + numel(shape)) of this tensor's elements.
  Tensor view(int64_t offset, const Shape& shape) const;
  Tensor reshape(const Shape& shape) const { return view(0, shape); }
  void zero_();

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace trident
