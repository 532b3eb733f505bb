// AdamW with decay ranges, gradient-norm clipping.
#include "optim/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/adamw.hpp"
#include "kernels/buffer.hpp"

namespace trident::optim {

template <typename T>
double sum_of_squares(const T* g, int64_t n) {
  return kernels::sum_of_squares_ranges(g, {{0, n}});  // fixed chunking, ordered sum (kernels/buffer.hpp)
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
AdamW<T>::AdamW(const std::vector<kernels::AdamWRange>& ranges, const OptimConfig& cfg, int64_t begin, int64_t end,
                Device dev, const std::vector<kernels::BiasRange>& biases, bool packed)
    : cfg_(cfg),
      begin_(begin),
      end_(end >= 0         ? end
           : ranges.empty() ? 0
                            : ranges.back().offset + ranges.back().size) {
  for (const auto& r : ranges) {  // relative to begin
    int64_t lo = std::max(r.offset, begin_), hi = std::min(r.offset + r.size, end_);
    if (hi > lo) ranges_.push_back({lo - begin_, hi - lo, r.weight_decay});
  }
  for (const auto& b : biases) {
    int64_t lo = std::max(b.offset, begin_), hi = std::min(b.offset + b.size, end_);
    if (hi > lo) biases_.push_back({lo - begin_, hi - lo, b.rate, b.mean});
  }
  packed_ = packed;
  TRIDENT_CHECK(!packed || dev.type == DeviceType::cpu, "AdamW: a packed second moment is the CPU's");
  int64_t held = 0;
  for (const auto& r : ranges_) held += r.size;
  m_ = Tensor::zeros({end_ - begin_}, dtype_of<T>(), MemCategory::optimizer, dev);
  v_ = Tensor::zeros({packed ? held : end_ - begin_}, dtype_of<T>(), MemCategory::optimizer, dev);
}

template <typename T>
std::vector<std::pair<int64_t, int64_t>> AdamW<T>::second_moment_runs() const {
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (packed_)
    for (const auto& r : ranges_) runs.push_back({r.offset, r.offset + r.size});
  return runs;
}

template <typename T>
void AdamW<T>::step(T* params, const T* grads, double lr, int64_t step, double grad_scale) {
  kernels::AdamWParams hp{lr, cfg_.betas[0], cfg_.betas[1], cfg_.eps, 0.0, step, grad_scale};
  if (packed_) {  // each range's second moment after the previous range's
    T* v = v_.data<T>();
    for (const auto& r : ranges_) {
      hp.weight_decay = r.weight_decay;
      kernels::adamw_update(params + r.offset, m_.data<T>() + r.offset, v, grads + r.offset, r.size, hp);
      v += r.size;
    }
  } else {
    kernels::adamw_update_multi(params, m_.data<T>(), v_.data<T>(), grads, ranges_, hp);
  }
  for (const auto& b : biases_)  // the gradient slot holds counts: never scaled
    kernels::bias_sign_update(params + b.offset, grads + b.offset, b.size, b.rate, b.mean);
}

template class AdamW<float>;
template class AdamW<double>;
template double clip_grad_norm<float>(float*, int64_t, double);
template double clip_grad_norm<double>(double*, int64_t, double);
template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);

}  // namespace trident::optim
