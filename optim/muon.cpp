// Muon: momentum, Newton-Schulz orthogonalisation, the update (muon.hpp).
#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

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

double newton_schulz_flops(int64_t rows, int64_t cols, int64_t ns_steps) {
  const double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  return double(ns_steps) * (4 * m * m * n + 2 * m * m * m);
}

template <typename T>
Muon<T>::Muon(std::vector<kernels::MuonMatrix> matrices, const MuonConfig& cfg, int64_t base, int64_t numel,
              int64_t begin, int64_t end, MuonGroup<T> group)
    : matrices_(std::move(matrices)),
      cfg_(cfg),
      base_(base),
      numel_(numel),
      begin_(begin),
      end_(end),
      group_(std::move(group)) {
  const int S = group_.slices, slots = S * group_.replicas;
  TRIDENT_CHECK(
      S >= 1 && group_.replicas >= 1 && (S == 1 || group_.exchange) && (group_.replicas == 1 || group_.combine),
      "Muon: a group of {} slices x {} replicas without its collectives", S, group_.replicas);
  // owners: the largest matrices first, each to the least loaded rank (ties: the lowest)
  std::vector<size_t> order(matrices_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto cost = [&](size_t i) { return newton_schulz_flops(matrices_[i].rows, matrices_[i].cols, cfg_.ns_steps); };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return cost(x) > cost(y); });
  flops_.assign(size_t(slots), 0);
  owner_.resize(matrices_.size());
  for (size_t i : order) {
    const int slot = int(std::min_element(flops_.begin(), flops_.end()) - flops_.begin());
    flops_[size_t(slot)] += cost(i);
    owner_[i].slice = slot % S, owner_[i].replica = slot / S;
  }
  // rounds: runs of consecutive matrices of about equal elements (one without a tensor group to exchange over)
  int64_t total = 0, so_far = 0;
  for (const auto& m : matrices_) total += m.rows * m.cols;
  const int R = S > 1 ? int(std::min<size_t>(size_t(std::max(1, group_.rounds)), matrices_.size())) : 1;
  rounds_ = {0};
  for (size_t i = 0; i < matrices_.size(); ++i) {
    so_far += matrices_[i].rows * matrices_[i].cols;
    if (i + 1 == matrices_.size() || so_far * R >= total * int64_t(rounds_.size())) rounds_.push_back(i + 1);
  }
  for (size_t i = 0; i < matrices_.size(); ++i) {
    const kernels::MuonMatrix& m = matrices_[i];
    TRIDENT_CHECK(int(m.held.size()) == S, "Muon: a matrix held by {} slices, the group has {}", m.held.size(), S);
    // what each slice sends the owner: its blocks the owner or a lower slice does not hold
    const int a = owner_[i].slice;
    std::vector<kernels::MatrixBlock> have = m.held[size_t(a)];
    owner_[i].sent.assign(size_t(S), {});
    for (int r = 0; r < S; ++r)
      for (const auto& b : m.held[size_t(r)]) {
        TRIDENT_CHECK(b.offset >= base && b.offset + b.rows * b.cols <= base + numel && b.row >= 0 &&
                          b.row + b.rows <= m.rows && b.col >= 0 && b.col + b.cols <= m.cols,
                      "Muon: a block at {} outside the part [{}, {}) or its {} x {} matrix", b.offset, base,
                      base + numel, m.rows, m.cols);
        if (r == a || std::find(have.begin(), have.end(), b) != have.end()) continue;
        owner_[i].sent[size_t(r)].push_back(b);
        have.push_back(b);
      }
    int64_t area = 0;
    for (const auto& b : have) area += b.rows * b.cols;
    TRIDENT_CHECK(area == m.rows * m.cols, "Muon: the blocks of a {} x {} matrix cover {} elements, not each once",
                  m.rows, m.cols, area);
  }
}

template <typename T>
void Muon<T>::step(T* params, const T* grads, T* momentum, double lr, double grad_scale) {
  if (matrices_.empty()) return;
  const T mu = T(cfg_.momentum), keep = T(1 - lr * cfg_.weight_decay), scale = T(grad_scale);
  const int s = group_.slice, S = group_.slices, y = group_.replica;
  // a block's elements, row by row: f(flat element of the rank's buffer, element of the row-major matrix, count)
  auto rows_of = [](const kernels::MatrixBlock& b, int64_t cols, auto&& f) {
    for (int64_t i = 0; i < b.rows; ++i) f(b.offset + i * b.cols, (b.row + i) * cols + b.col, b.cols);
  };
  // 1. the momentum of this rank's elements, their u into the part-sized buffer
  u_.assign(size_t(numel_), T(0));
  for (const auto& m : matrices_)
    for (const auto& b : m.held[size_t(s)])
      rows_of(b, m.cols, [&](int64_t at, int64_t, int64_t n) {
        for (int64_t e = std::max(at, begin_); e < std::min(at + n, end_); ++e) {
          const T gi = scale * grads[e - begin_];
          T& buf = momentum[e - begin_];
          buf = lerp(buf, gi, T(1) - mu);
          u_[size_t(e - base_)] = cfg_.nesterov ? lerp(gi, buf, mu) : buf;
        }
      });
  if (group_.gather) group_.gather(u_.data());
  // 2. the owners of this replica's matrices assemble, orthogonalise and send back, in rounds of matrices (the
  // same on every rank): round r + 1's blocks travel to their owners, and round r - 1's results back, while
  // round r's are orthogonalised
  auto mine = [&](size_t i, int slice) { return owner_[i].replica == y && owner_[i].slice == slice; };
  std::vector<std::vector<T>> whole(matrices_.size());
  struct Transfer {
    std::vector<T> send, recv;
    std::vector<int64_t> send_counts, recv_counts;
    MuonTransfer<T> done;
  };
  const size_t R = rounds_.size() - 1;
  std::vector<Transfer> to(R), back(R);
  auto pending = [&] {  // drives the transfers in flight (MPI progresses inside its calls)
    for (auto* list : {&to, &back})
      for (Transfer& t : *list)
        if (t.done.poll) t.done.poll();
  };
  // appends a block's elements to t.send: from the part's buffer, or from the whole matrix w
  auto pack = [&](Transfer& t, const kernels::MatrixBlock& b, int64_t cols, const std::vector<T>* w) {
    rows_of(b, cols, [&](int64_t at, int64_t el, int64_t n) {
      const T* src = w ? w->data() + el : u_.data() + (at - base_);
      t.send.insert(t.send.end(), src, src + n);
    });
  };
  auto post = [&](Transfer& t) {
    t.recv.resize(size_t(std::accumulate(t.recv_counts.begin(), t.recv_counts.end(), int64_t(0))));
    t.done = group_.exchange(t.send.data(), t.send_counts, t.recv.data(), t.recv_counts);
  };
  auto send_to_owners = [&](size_t r) {
    Transfer& t = to[r];
    t.send_counts.assign(size_t(S), 0), t.recv_counts.assign(size_t(S), 0);
    for (int a = 0; a < S; ++a)
      for (size_t i = rounds_[r]; i < rounds_[r + 1] && a != s; ++i) {
        if (mine(i, a))
          for (const auto& b : owner_[i].sent[size_t(s)]) {
            pack(t, b, matrices_[i].cols, nullptr);
            t.send_counts[size_t(a)] += b.rows * b.cols;
          }
        if (mine(i, s))
          for (const auto& b : owner_[i].sent[size_t(a)]) t.recv_counts[size_t(a)] += b.rows * b.cols;
      }
    post(t);
  };
  auto orthogonalise = [&](size_t r) {  // round r's matrices this rank owns, from its blocks and the others'
    Transfer& t = to[r];
    if (t.done.wait) t.done.wait();
    int64_t at_recv = 0;
    for (int q = 0; q < S; ++q)  // recv: slice q's blocks of my matrices, in matrix order
      for (size_t i = rounds_[r]; i < rounds_[r + 1]; ++i) {
        if (!mine(i, s)) continue;
        const kernels::MuonMatrix& m = matrices_[i];
        std::vector<T>& w = whole[i];
        if (w.empty()) {
          w.assign(size_t(m.rows * m.cols), T(0));
          for (const auto& b : m.held[size_t(s)])
            rows_of(b, m.cols, [&](int64_t at, int64_t el, int64_t n) {
              std::copy_n(u_.data() + (at - base_), n, w.data() + el);
            });
        }
        if (q == s) continue;
        for (const auto& b : owner_[i].sent[size_t(q)])
          rows_of(b, m.cols, [&](int64_t, int64_t el, int64_t n) {
            std::copy_n(t.recv.data() + at_recv, n, w.data() + el);
            at_recv += n;
          });
      }
    for (size_t i = rounds_[r]; i < rounds_[r + 1]; ++i)
      if (mine(i, s)) {
        newton_schulz(whole[i].data(), matrices_[i].rows, matrices_[i].cols, cfg_);
        for (const auto& b : matrices_[i].held[size_t(s)])
          rows_of(b, matrices_[i].cols, [&](int64_t at, int64_t el, int64_t n) {
            std::copy_n(whole[i].data() + el, n, u_.data() + (at - base_));
          });
        pending();
      }
  };
  auto send_back = [&](size_t r) {  // every holder its blocks of round r's results
    Transfer& t = back[r];
    t.send_counts.assign(size_t(S), 0), t.recv_counts.assign(size_t(S), 0);
    for (int q = 0; q < S; ++q)
      for (size_t i = rounds_[r]; i < rounds_[r + 1]; ++i) {
        if (q == s) continue;
        if (mine(i, s))
          for (const auto& b : matrices_[i].held[size_t(q)]) {
            pack(t, b, matrices_[i].cols, &whole[i]);
            t.send_counts[size_t(q)] += b.rows * b.cols;
          }
        if (mine(i, q))
          for (const auto& b : matrices_[i].held[size_t(s)]) t.recv_counts[size_t(q)] += b.rows * b.cols;
      }
    post(t);
  };
  auto receive_back = [&](size_t r) {
    Transfer& t = back[r];
    t.done.wait();
    int64_t at_recv = 0;
    for (int q = 0; q < S; ++q)
      for (size_t i = rounds_[r]; i < rounds_[r + 1]; ++i)
        if (q != s && mine(i, q))
          for (const auto& b : matrices_[i].held[size_t(s)])
            rows_of(b, matrices_[i].cols, [&](int64_t at, int64_t, int64_t n) {
              std::copy_n(t.recv.data() + at_recv, n, u_.data() + (at - base_));
              at_recv += n;
            });
  };
  if (S > 1) send_to_owners(0);
  for (size_t r = 0; r < R; ++r) {
    if (S > 1 && r + 1 < R) send_to_owners(r + 1);
    orthogonalise(r);
    if (S > 1) send_back(r);
  }
  if (S > 1)
    for (size_t r = 0; r < R; ++r) receive_back(r);
  // 3. the other replicas' matrices from their owners
  if (group_.replicas > 1) {
    for (size_t i = 0; i < matrices_.size(); ++i)
      if (owner_[i].replica != y)
        for (const auto& b : matrices_[i].held[size_t(s)])
          std::fill_n(u_.data() + (b.offset - base_), b.rows * b.cols, T(0));
    group_.combine(u_.data());
  }
  // the update of this rank's elements
  for (const auto& m : matrices_) {
    const T step = T(lr * muon_lr_ratio(cfg_.adjust_lr, m.rows, m.cols));
    for (const auto& b : m.held[size_t(s)])
      for (int64_t e = std::max(b.offset, begin_); e < std::min(b.offset + b.rows * b.cols, end_); ++e) {
        T& p = params[e - begin_];
        p = p * keep - step * u_[size_t(e - base_)];
      }
  }
}

template class Muon<float>;
template class Muon<double>;
template void newton_schulz<float>(float*, int64_t, int64_t, const MuonConfig&);
template void newton_schulz<double>(double*, int64_t, int64_t, const MuonConfig&);

}  // namespace trident::optim
