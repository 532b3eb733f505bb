// AdamW with decay ranges, gradient-norm clipping.
#include "optim/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/adamw.hpp"
#include "kernels/buffer.hpp"

namespace trident::optim {

std::vector<Range> decay_ranges(const model::ParamRegistry& reg, const OptimConfig& cfg) {
  std::vector<Range> out;
  for (const auto& p : reg.params()) {
    bool decay =
        p.kind == model::ParamKind::weight ||
        ((p.kind == model::ParamKind::bias || p.kind == model::ParamKind::norm) && cfg.decay_norms_and_biases) ||
        (p.kind == model::ParamKind::embedding && cfg.decay_embeddings);
    if (!out.empty() && out.back().decay == decay && out.back().offset + out.back().size == p.offset)
      out.back().size += p.numel;
    else
      out.push_back({p.offset, p.numel, decay});
  }
  return out;
}

template <typename T>
double sum_of_squares(const T* g, int64_t n) {
  return kernels::sum_of_squares_ranges(g, {{0, n}});  // fixed chunking, ordered sum (kernels/buffer.hpp)
}

double sum_of_squares_counted(const model::ParamRegistry& reg, const float* g, int64_t begin, int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // maximal runs of counted parameters, relative to g
  int64_t run_begin = -1, run_end = -1;
  auto flush = [&] {
    if (run_begin >= 0) runs.push_back({run_begin - begin, run_end - begin});
    run_begin = run_end = -1;
  };
  for (const auto& p : reg.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (hi <= lo) continue;
    if (!p.counts_in_norm) {
      flush();
      continue;
    }
    if (run_begin >= 0 && run_end == lo) {
      run_end = hi;
    } else {
      flush();
      run_begin = lo, run_end = hi;
    }
  }
  flush();
  return kernels::sum_of_squares_ranges(g, runs);  // one pass on the device, where g lives
}

template <typename T>
double clip_grad_norm(T* grads, int64_t n, double max_norm) {
  double norm = std::sqrt(sum_of_squares(grads, n));
  if (clip_scale(norm, max_norm) != 1.0) {
    const T scale = T(clip_scale(norm, max_norm));
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) grads[i] *= scale;
  }
  return norm;
}

template <typename T>
AdamW<T>::AdamW(const model::ParamRegistry& reg, const OptimConfig& cfg, int64_t begin, int64_t end, Device dev)
    : cfg_(cfg), begin_(begin), end_(end < 0 ? reg.total() : end) {
  for (Range r : decay_ranges(reg, cfg)) {  // relative to begin, with their weight decay
    int64_t lo = std::max(r.offset, begin_), hi = std::min(r.offset + r.size, end_);
    if (hi > lo) ranges_.push_back({lo - begin_, hi - lo, r.decay ? cfg.weight_decay : 0.0});
  }
  m_ = Tensor::zeros({end_ - begin_}, dtype_of<T>(), MemCategory::optimizer, dev);
  v_ = Tensor::zeros({end_ - begin_}, dtype_of<T>(), MemCategory::optimizer, dev);
}

template <typename T>
void AdamW<T>::step(T* params, const T* grads, double lr, int64_t step, double grad_scale) {
  kernels::AdamWParams hp{lr, cfg_.betas[0], cfg_.betas[1], cfg_.eps, 0.0, step, grad_scale};
  kernels::adamw_update_multi(params, m_.data<T>(), v_.data<T>(), grads, ranges_, hp);
}

template class AdamW<float>;
template class AdamW<double>;
template double clip_grad_norm<float>(float*, int64_t, double);
template double clip_grad_norm<double>(double*, int64_t, double);
template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);

}  // namespace trident::optim
