// Muon: momentum, Newton-Schulz orthogonalisation, the update (muon.hpp).
#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kernels/gemm.hpp"

namespace trident::optim {

namespace {

// torch.lerp's two forms (its rounding): start + w (end - start) for w < 0.5, else end - (end - start) (1 - w)
template <typename T>
T lerp(T start, T end, T w) {
  return w < T(0.5) ? start + w * (end - start) : end - (end - start) * (T(1) - w);
}

template <typename T>
void round_bf16(T* x, int64_t n, bool on) {
  if (!on) return;
  for (int64_t i = 0; i < n; ++i) x[i] = T(bf16_to_f32(f32_to_bf16(float(x[i]))));
}

}  // namespace

double muon_lr_ratio(MuonAdjustLr adjust, int64_t rows, int64_t cols) {
  const double A = double(rows), B = double(cols);
  switch (adjust) {
    case MuonAdjustLr::original:
      return std::sqrt(std::max(1.0, A / B));
    case MuonAdjustLr::match_rms_adamw:
      return 0.2 * std::sqrt(std::max(A, B));
    case MuonAdjustLr::spectral:
      return std::sqrt(A / B);
  }
  return 1.0;
}

template <typename T>
void newton_schulz(T* x, int64_t rows, int64_t cols, const MuonConfig& cfg) {
  const bool bf16 = cfg.ns_precision == MuonPrecision::bf16, tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;  // X [m, n], m <= n
  std::vector<T> X(size_t(m * n)), Y(X.size()), A(size_t(m * m)), B(A.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) X[size_t(tall ? j * n + i : i * n + j)] = x[i * cols + j];
  round_bf16(X.data(), m * n, bf16);
  double sq = 0;
  for (T v : X) sq += double(v) * double(v);
  T norm = T(std::sqrt(sq));
  round_bf16(&norm, 1, bf16);
  norm = std::max(norm, T(1e-7));
  round_bf16(&norm, 1, bf16);
  for (T& v : X) v /= norm;
  round_bf16(X.data(), m * n, bf16);
  const auto [a, b, c] = cfg.ns_coefficients;
  for (int64_t s = 0; s < cfg.ns_steps; ++s) {
    kernels::gemm<T>(false, true, m, m, n, T(1), X.data(), n, X.data(), n, T(0), A.data(), m);  // A = X X^T
    round_bf16(A.data(), m * m, bf16);
    B = A;
    kernels::gemm<T>(false, false, m, m, m, T(c), A.data(), m, A.data(), m, T(b), B.data(), m);  // b A + c A A
    round_bf16(B.data(), m * m, bf16);
    Y = X;
    kernels::gemm<T>(false, false, m, n, m, T(1), B.data(), m, X.data(), n, T(a), Y.data(), n);  // a X + B X
    round_bf16(Y.data(), m * n, bf16);
    std::swap(X, Y);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = X[size_t(tall ? j * n + i : i * n + j)];
}

template <typename T>
Muon<T>::Muon(std::vector<kernels::MatrixRange> matrices, const MuonConfig& cfg, int64_t base, int64_t numel,
              int64_t begin, int64_t end)
    : cfg_(cfg), base_(base), numel_(numel), begin_(begin), end_(end) {
  for (const auto& mr : matrices) {
    TRIDENT_CHECK(mr.offset >= base && mr.offset + mr.rows * mr.cols <= base + numel && mr.rows > 0 && mr.cols > 0,
                  "Muon: a matrix at {} outside the part [{}, {})", mr.offset, base, base + numel);
    if (mr.offset < end && mr.offset + mr.rows * mr.cols > begin) matrices_.push_back(mr);
  }
}

template <typename T>
void Muon<T>::step(T* params, const T* grads, T* momentum, double lr, double grad_scale,
                   const std::function<void(T*)>& gather) {
  if (matrices_.empty() && !gather) return;
  const T mu = T(cfg_.momentum), keep = T(1 - lr * cfg_.weight_decay), scale = T(grad_scale);
  const bool whole = !gather;
  if (!whole) u_.assign(size_t(numel_), T(0));
  std::vector<T> own;
  // the momentum of this rank's elements, and their u (in the part-sized buffer, or per matrix)
  auto update_momentum = [&](const kernels::MatrixRange& mr, T* u) {
    const int64_t lo = std::max(mr.offset, begin_), hi = std::min(mr.offset + mr.rows * mr.cols, end_);
    for (int64_t i = lo; i < hi; ++i) {
      const T gi = scale * grads[i - begin_];
      T& buf = momentum[i - begin_];
      buf = lerp(buf, gi, T(1) - mu);
      u[i - mr.offset] = cfg_.nesterov ? lerp(gi, buf, mu) : buf;
    }
  };
  for (const auto& mr : matrices_)
    if (!whole) update_momentum(mr, u_.data() + (mr.offset - base_));
  if (!whole) gather(u_.data());
  for (const auto& mr : matrices_) {
    const int64_t n = mr.rows * mr.cols;
    T* u = nullptr;
    if (whole) {
      own.resize(size_t(n));
      update_momentum(mr, own.data());
      u = own.data();
    } else {
      u = u_.data() + (mr.offset - base_);
    }
    newton_schulz(u, mr.rows, mr.cols, cfg_);
    const T step = T(lr * muon_lr_ratio(cfg_.adjust_lr, mr.rows, mr.cols));
    const int64_t lo = std::max(mr.offset, begin_), hi = std::min(mr.offset + n, end_);
    for (int64_t i = lo; i < hi; ++i) {
      T& p = params[i - begin_];
      p = p * keep - step * u[i - mr.offset];
    }
  }
}

template class Muon<float>;
template class Muon<double>;
template void newton_schulz<float>(float*, int64_t, int64_t, const MuonConfig&);
template void newton_schulz<double>(double*, int64_t, int64_t, const MuonConfig&);

}  // namespace trident::optim
