// CPU AdamW update, over one buffer or over ranges with their weight decay.
#include "kernels/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace trident::kernels {

namespace cpu {
template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp) {
  const T b1 = T(hp.beta1), b2 = T(hp.beta2);
  const T c1 = T(1.0 / (1.0 - std::pow(hp.beta1, double(hp.step))));
  const T c2 = T(1.0 / (1.0 - std::pow(hp.beta2, double(hp.step))));
  const T lr = T(hp.lr), eps = T(hp.eps), wd = T(hp.weight_decay), gs = T(hp.grad_scale);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * gs;
    T mi = b1 * m[i] + (T(1) - b1) * g;
    T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + wd * param[i]);
  }
}

template <typename T>
void adamw_update_multi(T* param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges,
                        const AdamWParams& hp) {
  for (const auto& r : ranges) {
    AdamWParams one = hp;
    one.weight_decay = r.weight_decay;
    cpu::adamw_update(param + r.offset, m + r.offset, v + r.offset, grad + r.offset, r.size, one);
  }
}

template <typename T>
void bias_sign_update(T* param, const T* count, int64_t n, double rate, double mean) {
  for (int64_t i = 0; i < n; ++i) {
    const double gap = mean - double(count[i]);
    param[i] += T(rate * double((gap > 0) - (gap < 0)));
  }
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                   \
  template void cpu::adamw_update<T>(T*, T*, T*, const T*, int64_t, const AdamWParams&); \
  template void cpu::bias_sign_update<T>(T*, const T*, int64_t, double, double);         \
  template void cpu::adamw_update_multi<T>(T*, T*, T*, const T*, const std::vector<AdamWRange>&, const AdamWParams&);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
