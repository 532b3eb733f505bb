// Tensor storage and the host allocator's accounting.
#include "core/tensor.hpp"

#include "core/device_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace trident {

namespace {
std::mutex g_alloc_mutex;
}

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::params:
      return "params";
    case MemCategory::grads:
      return "grads";
    case MemCategory::optimizer:
      return "optimizer";
    case MemCategory::activations:
      return "activations";
    case MemCategory::comm:
      return "comm";
    case MemCategory::other:
      return "other";
  }
  return "?";
}

HostAllocator& HostAllocator::instance() {
  static HostAllocator a;
  return a;
}

void* HostAllocator::allocate(size_t bytes, MemCategory cat) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  int i = int(cat);
  stats_.current[i] += int64_t(bytes);
  stats_.total_current += int64_t(bytes);
  if (stats_.current[i] > stats_.peak[i]) stats_.peak[i] = stats_.current[i];
  if (stats_.total_current > stats_.total_peak) stats_.total_peak = stats_.total_current;
  return p;
}

void HostAllocator::release(void* p, size_t bytes, MemCategory cat) {
  std::free(p);
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  stats_.current[int(cat)] -= int64_t(bytes);
  stats_.total_current -= int64_t(bytes);
}

MemStats HostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  return stats_;
}

void HostAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  stats_.peak = stats_.current;
  stats_.total_peak = stats_.total_current;
}

Storage::Storage(size_t b, MemCategory cat, Device dev) : bytes(b), category(cat), device(dev) {
  data = dev.type == DeviceType::cpu ? HostAllocator::instance().allocate(bytes, cat)
                                     : device_alloc(bytes, dev.index, cat);
}

Storage::Storage(void* borrowed, size_t b, Device dev) : data(borrowed), bytes(b), device(dev), owned(false) {}

Storage::~Storage() {
  if (!owned) return;
  if (device.type == DeviceType::cpu)
    HostAllocator::instance().release(data, bytes, category);
  else
    device_free(data, bytes, device.index, category);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::borrow_raw(void* data, int64_t n, DType dtype, Device dev) {
  // memory of the device allocator is a cuda tensor, whatever the caller said
  if (dev.type == DeviceType::cpu && is_device_pointer(data)) dev = Device{DeviceType::cuda, current_device()};
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, size_t(n) * dtype_size(dtype), dev);
  t.shape_ = {n};
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory cat, Device dev) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), cat, dev);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemCategory cat, Device dev) {
  Tensor t = empty(shape, dtype, cat, dev);
  t.zero_();
  return t;
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  TRIDENT_CHECK(offset >= 0 && offset + shape_numel(shape) <= numel(), "view [{}, {}) outside tensor of {} elements",
                offset, offset + shape_numel(shape), numel());
  Tensor t = *this;
  t.offset_ = offset_ + offset;
  t.shape_ = shape;
  return t;
}

void Tensor::zero_() {
  if (!storage_) return;
  if (device().type == DeviceType::cpu)
    std::memset(raw(), 0, nbytes());
  else
    device_memset_zero(raw(), nbytes(), device().index);
}

}  // namespace trident
