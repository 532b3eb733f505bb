// Whole-buffer operations that follow the data: on the CPU for host memory,
// on the compute stream for device memory (core/device_memory.hpp). The
// model and the parallel code use these instead of std::copy / std::fill /
// loops, so the same code runs on either.
// sum and sum_of_squares_ranges return to the host: with device data they
// wait for the compute stream. Both use a fixed chunking (64K elements, in
// double, chunks summed in order): a result does not depend on the thread
// count.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace trident::kernels {

template <typename T>
void copy(T* dst, const T* src, int64_t n);
template <typename T>
void fill_zero(T* x, int64_t n);
template <typename T>
double sum(const T* x, int64_t n);
// sum over the ranges [begin, end) of x of x^2
template <typename T>
double sum_of_squares_ranges(const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges);
// The host waits for the device's queued work (a no-op without a device).
void synchronize();

}  // namespace trident::kernels
