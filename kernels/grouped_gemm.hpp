// The grouped linear of a mixture-of-experts layer: G independent linears
// over variable row counts (the experts, each with its tokens), one call.
// Group g owns rows [offsets[g], offsets[g+1]) of x [M, C] and y [M, OC]
// and the weight w + g OC C ([OC, C], torch.nn.Linear's layout: experts
// [G, OC, C] as transformers 5 stores them). A group without rows computes
// nothing (with accumulate = false its weight gradient is zeroed).
// Host buffers; one call runs the groups either one after the other, each
// GEMM on every thread (few large groups), or across the threads, each GEMM
// on one (many groups); `automatic` spreads them when there are at least
// twice as many groups as threads (docs/performance.md has the measurement). Either way each group's result
// is that of one GEMM, the same in every run with the same threads.
#pragma once
#include <cstdint>

#include "kernels/precision.hpp"

namespace trident::kernels {

enum class GroupedSchedule { automatic, per_group, across_groups };

// y[rows of g] = x[rows of g] w_g^T
template <typename T>
void grouped_linear_forward(T* y, const T* x, const T* w, const int64_t* offsets, int64_t G, int64_t C, int64_t OC,
                            Precision math = Precision::fp32, GroupedSchedule schedule = GroupedSchedule::automatic);

// dx[rows of g] = dy[rows of g] w_g (dx may be null); dw_g (+)= dy_g^T x_g.
template <typename T>
void grouped_linear_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const int64_t* offsets, int64_t G,
                             int64_t C, int64_t OC, bool accumulate, Precision math = Precision::fp32,
                             GroupedSchedule schedule = GroupedSchedule::automatic);

// The experts' biases (gpt-oss): y[rows of g] += b_g, b [G, OC].
template <typename T>
void grouped_bias_forward(T* y, const T* b, const int64_t* offsets, int64_t G, int64_t OC);
// db_g (+)= the sum of dy over g's rows (a group without rows: zero, or unchanged).
template <typename T>
void grouped_bias_backward(T* db, const T* dy, const int64_t* offsets, int64_t G, int64_t OC, bool accumulate);

}  // namespace trident::kernels
