// Context-parallel attention: ring and all-to-all (see context_parallel.hpp).
#include "parallel/context_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "kernels/attention.hpp"

namespace trident::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Adds the seconds of its scope to a counter.
struct Timed {
  double& total;
  Clock::time_point t0 = Clock::now();
  ~Timed() { total += since(t0); }
};

constexpr int kTagKv = 71, kTagDkv = 72, kTagAll = 73;

// Waits for a transfer, counting the time as exposed communication.
void wait_exposed(WorkPtr& w, double& exposed) {
  if (!w) return;
  const auto t0 = Clock::now();
  w->wait();
  exposed += since(t0);
  w.reset();
}

}  // namespace

ContextParallel::ContextParallel(Communicator* group, ContextMode mode, int64_t seq_len)
    : group_(group && group->size() > 1 ? group : nullptr), mode_(mode), seq_len_(seq_len) {
  const int N = size();
  positions_.assign(size_t(N), {});
  if (N == 1) {  // the whole sequence, any length
    for (int64_t t = 0; t < seq_len; ++t) positions_[0].push_back(int32_t(t));
    return;
  }
  TRIDENT_CHECK(seq_len % (2 * N) == 0, "seq_len {} does not split into 2 x {} chunks", seq_len, N);
  const int64_t c = seq_len / (2 * N);
  for (int r = 0; r < N; ++r)
    for (int64_t chunk : {int64_t(r), int64_t(2 * N - 1 - r)})
      for (int64_t t = chunk * c; t < (chunk + 1) * c; ++t) positions_[size_t(r)].push_back(int32_t(t));
  for (const auto& p : positions_) positions_full_.insert(positions_full_.end(), p.begin(), p.end());
}

void ContextParallel::take_local(const int32_t* full, int32_t* local, int64_t B) const {
  const int64_t Tl = local_len();
  const auto& pos = positions();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t) local[b * Tl + t] = full[b * seq_len_ + pos[size_t(t)]];
}

void ContextParallel::shard(Batch& batch) const {
  if (size() == 1) return;
  const int64_t B = batch.B, Tl = local_len();
  TRIDENT_CHECK(batch.T == seq_len_, "context shard of rows {}, the sequence has {}", batch.T, seq_len_);
  auto local = [&](std::vector<int32_t>& whole) {
    if (whole.empty()) return;
    std::vector<int32_t> mine(size_t(B * Tl));
    take_local(whole.data(), mine.data(), B);
    whole = std::move(mine);
  };
  local(batch.tokens), local(batch.targets), local(batch.doc_start);
  // row t sits at global position p = positions[t]: origin t - p, or with
  // documents t - (p - start) so that positions count from the document start
  const auto& pos = positions();
  batch.origin.resize(size_t(B * Tl));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t i = b * Tl + t;
      batch.origin[size_t(i)] =
          int32_t(t - pos[size_t(t)]) + (batch.doc_start.empty() ? 0 : batch.doc_start[size_t(i)]);
    }
  batch.T = Tl;
}

template <typename T>
T* ContextParallel::scratch(int i, int64_t n) {
  if (scratch_.size() <= size_t(i)) scratch_.resize(size_t(i) + 1);
  Tensor& s = scratch_[size_t(i)];
  if (!s.defined() || s.dtype() != dtype_of<T>() || s.numel() < n)  // kept for the next layer: sizes repeat
    s = Tensor::empty({n}, dtype_of<T>(), MemCategory::comm);
  return s.data<T>();
}

template <typename T>
void ContextParallel::exchange(const T* send, T* recv, int64_t per, int tag) {
  const int N = size(), me = rank();
  std::vector<WorkPtr> works;
  for (int j = 0; j < N; ++j) {
    if (j == me) continue;
    works.push_back(group_->recv(Tensor::borrow(recv + j * per, per), {j, tag}));
    works.push_back(group_->send(Tensor::borrow(const_cast<T*>(send + j * per), per), {j, tag}));
    traffic_.bytes += per * int64_t(sizeof(T));
  }
  std::copy_n(send + me * per, per, recv + me * per);
  for (auto& w : works) wait_exposed(w, traffic_.exposed_s);
}

// ---- ring ----------------------------------------------------------------

template <typename T>
void ContextParallel::ring_forward(T* out, T* lse, const T* qkv, const AttentionArgs<T>& x) {
  const int64_t B = x.B, H = x.H, KV = x.KV, D = x.D, Dv = x.Dv;
  const int N = size(), r = rank();
  const int64_t Tl = local_len(), W = kernels::attention_qkv_width(H, KV, D, Dv), KW = KV * (D + Dv), n = B * Tl * KW;
  T* cur = scratch<T>(0, n);
  T* nxt = scratch<T>(1, n);
  for (int64_t row = 0; row < B * Tl; ++row) std::copy_n(qkv + row * W + H * D, KW, cur + row * KW);  // k | v
  kernels::AttentionBlock<T> a;
  a.B = B, a.Tq = Tl, a.Tk = Tl, a.H = H, a.KV = KV, a.D = D, a.Dv = Dv;
  a.q = qkv, a.ldq = W, a.ldkv = KW, a.q_pos = positions().data(), a.doc_start = x.doc_start, a.window = x.window;
  a.head_max = x.head_max;
  for (int s = 0; s < N; ++s) {
    WorkPtr sent, got;
    if (s + 1 < N) {  // the next block travels while this one is attended to
      got = group_->recv(Tensor::borrow(nxt, n), {(r + N - 1) % N, kTagKv});
      sent = group_->send(Tensor::borrow(cur, n), {(r + 1) % N, kTagKv});
      traffic_.bytes += n * int64_t(sizeof(T));
    }
    const int src = (r + N - s) % N;
    a.k = cur, a.v = cur + KV * D, a.k_pos = positions_[size_t(src)].data();
    kernels::attention_block_forward(out, H * Dv, lse, a, /*merge=*/s > 0);
    wait_exposed(got, traffic_.exposed_s);
    wait_exposed(sent, traffic_.exposed_s);
    std::swap(cur, nxt);
  }
  if (x.sinks) kernels::attention_sink_forward(out, H * Dv, lse, x.sinks, B, Tl, H, Dv);
}

template <typename T>
void ContextParallel::ring_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                                    const AttentionArgs<T>& x) {
  const int64_t B = x.B, H = x.H, KV = x.KV, D = x.D, Dv = x.Dv;
  const int N = size(), r = rank(), next = (r + 1) % N, prev = (r + N - 1) % N;
  const int64_t Tl = local_len(), W = kernels::attention_qkv_width(H, KV, D, Dv), KW = KV * (D + Dv), n = B * Tl * KW;
  T* cur = scratch<T>(0, n);
  T* nxt = scratch<T>(1, n);
  T* part[2] = {scratch<T>(2, n), scratch<T>(3, n)};  // this step's dK|dV partials, sent on
  T* home = scratch<T>(4, n);                         // the partials received from the previous rank
  T* delta = scratch<T>(5, B * H * Tl);
  kernels::attention_delta(delta, dout, out, H * Dv, B, Tl, H, Dv);
  if (x.sinks) kernels::attention_sink_backward(x.dsinks, lse, delta, x.sinks, B, Tl, H);
  std::memset(static_cast<void*>(dqkv), 0, sizeof(T) * size_t(B * Tl * W));
  for (int64_t row = 0; row < B * Tl; ++row) std::copy_n(qkv + row * W + H * D, KW, cur + row * KW);
  kernels::AttentionBlock<T> a;
  a.B = B, a.Tq = Tl, a.Tk = Tl, a.H = H, a.KV = KV, a.D = D, a.Dv = Dv;
  a.q = qkv, a.ldq = W, a.ldkv = KW, a.q_pos = positions().data(), a.doc_start = x.doc_start, a.window = x.window;
  WorkPtr dkv_sent, dkv_got;
  for (int s = 0; s < N; ++s) {
    WorkPtr sent, got;
    if (s + 1 < N) {
      got = group_->recv(Tensor::borrow(nxt, n), {prev, kTagKv});
      sent = group_->send(Tensor::borrow(cur, n), {next, kTagKv});
      traffic_.bytes += n * int64_t(sizeof(T));
    }
    const int src = (r + N - s) % N;
    a.k = cur, a.v = cur + KV * D, a.k_pos = positions_[size_t(src)].data();
    T* mine = part[s % 2];
    wait_exposed(dkv_sent, traffic_.exposed_s);  // the buffer two steps back is free again
    std::memset(static_cast<void*>(mine), 0, sizeof(T) * size_t(n));
    kernels::attention_block_backward(dqkv, W, mine, mine + KV * D, KW, dout, H * Dv, lse, delta, a);
    // add what the ranks before this one computed for the same block, and pass it on
    wait_exposed(dkv_got, traffic_.exposed_s);
    if (s > 0)
      for (int64_t i = 0; i < n; ++i) mine[i] += home[i];
    dkv_got = group_->recv(Tensor::borrow(home, n), {prev, kTagDkv});
    dkv_sent = group_->send(Tensor::borrow(mine, n), {next, kTagDkv});
    traffic_.bytes += n * int64_t(sizeof(T));
    wait_exposed(got, traffic_.exposed_s);
    wait_exposed(sent, traffic_.exposed_s);
    std::swap(cur, nxt);
  }
  wait_exposed(dkv_got, traffic_.exposed_s);  // this rank's own block, with every rank's share
  wait_exposed(dkv_sent, traffic_.exposed_s);
  for (int64_t row = 0; row < B * Tl; ++row) std::copy_n(home + row * KW, KW, dqkv + row * W + H * D);
}

// ---- all-to-all (Ulysses) ------------------------------------------------

template <typename T>
kernels::AttentionBlock<T> ContextParallel::gather_heads(const T* qkv, const AttentionArgs<T>& x) {
  const int64_t B = x.B, H = x.H, KV = x.KV, D = x.D, Dv = x.Dv;
  const int32_t* ds = x.doc_start;
  const int N = size();
  const int64_t Tl = local_len(), W = kernels::attention_qkv_width(H, KV, D, Dv), Hs = H / N, KVs = KV / N;
  const int64_t Ws = kernels::attention_qkv_width(Hs, KVs, D, Dv), per = B * Tl * Ws;
  T* send = scratch<T>(1, N * per);
  T* recv = scratch<T>(2, N * per);
  for (int j = 0; j < N; ++j)
    for (int64_t row = 0; row < B * Tl; ++row) {
      const T* x = qkv + row * W;
      T* y = send + j * per + row * Ws;
      std::copy_n(x + j * Hs * D, Hs * D, y);
      std::copy_n(x + (H + j * KVs) * D, KVs * D, y + Hs * D);
      std::copy_n(x + (H + KV) * D + j * KVs * Dv, KVs * Dv, y + (Hs + KVs) * D);
    }
  exchange(send, recv, per, kTagAll);
  T* full = scratch<T>(0, N * per);  // [B][rank i's rows][Ws]
  for (int i = 0; i < N; ++i)
    for (int64_t b = 0; b < B; ++b) std::copy_n(recv + i * per + b * Tl * Ws, Tl * Ws, full + (b * N + i) * Tl * Ws);
  kernels::AttentionBlock<T> a;
  a.B = B, a.Tq = a.Tk = seq_len_, a.H = Hs, a.KV = KVs, a.D = D, a.Dv = Dv;
  a.q = full, a.ldq = Ws, a.k = full + Hs * D, a.v = full + (Hs + KVs) * D, a.ldkv = Ws;
  a.q_pos = a.k_pos = positions_full_.data(), a.window = x.window;
  if (ds) {  // every rank's document starts, in the same rank-major order
    doc_full_.resize(size_t(N * B * Tl));
    std::vector<int32_t> gathered(size_t(N * B * Tl));
    std::copy_n(ds, B * Tl, gathered.begin() + rank() * B * Tl);
    group_->all_gather(Tensor::borrow(gathered.data(), N * B * Tl))->wait();
    for (int i = 0; i < N; ++i)
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(gathered.begin() + (i * B + b) * Tl, Tl, doc_full_.begin() + (b * N + i) * Tl);
    a.doc_start = doc_full_.data();
  }
  return a;
}

template <typename T>
void ContextParallel::all_to_all_forward(T* out, T* lse, const T* qkv, const AttentionArgs<T>& x) {
  const int64_t B = x.B, H = x.H, Dv = x.Dv;
  const int N = size();
  const int64_t Tl = local_len(), Hs = H / N;
  kernels::AttentionBlock<T> a = gather_heads(qkv, x);
  if (x.head_max) a.head_max = x.head_max + rank() * Hs;
  const int64_t per = B * Tl * Hs * Dv;
  T* o = scratch<T>(3, N * per);  // [B][Tf][Hs Dv], then the rows of rank i at (b * N + i) * Tl
  kernels::attention_block_forward(o, Hs * Dv, lse, a, false);
  if (x.sinks) kernels::attention_sink_forward(o, Hs * Dv, lse, x.sinks + rank() * Hs, B, seq_len_, Hs, Dv);
  T* send = scratch<T>(1, N * per);
  T* recv = scratch<T>(2, N * per);
  for (int i = 0; i < N; ++i)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(o + (b * N + i) * Tl * Hs * Dv, Tl * Hs * Dv, send + i * per + b * Tl * Hs * Dv);
  exchange(send, recv, per, kTagAll);
  for (int j = 0; j < N; ++j)  // rank j's heads of this rank's rows
    for (int64_t row = 0; row < B * Tl; ++row)
      std::copy_n(recv + j * per + row * Hs * Dv, Hs * Dv, out + row * H * Dv + j * Hs * Dv);
}

template <typename T>
void ContextParallel::all_to_all_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                                          const AttentionArgs<T>& x) {
  const int64_t B = x.B, H = x.H, KV = x.KV, D = x.D, Dv = x.Dv;
  const int N = size();
  const int64_t Tl = local_len(), W = kernels::attention_qkv_width(H, KV, D, Dv), Hs = H / N, KVs = KV / N;
  const int64_t Ws = kernels::attention_qkv_width(Hs, KVs, D, Dv), Tf = seq_len_;
  // the row dot products of the local rows, then this rank's heads of every row
  T* delta_l = scratch<T>(6, B * H * Tl);
  kernels::attention_delta(delta_l, dout, out, H * Dv, B, Tl, H, Dv);
  const int64_t dper = B * Hs * Tl;
  T* dsend = scratch<T>(7, N * dper);
  T* drecv = scratch<T>(8, N * dper);
  for (int j = 0; j < N; ++j)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(delta_l + (b * H + j * Hs) * Tl, Hs * Tl, dsend + j * dper + b * Hs * Tl);
  exchange(dsend, drecv, dper, kTagAll);
  T* delta = scratch<T>(9, B * Hs * Tf);  // [B][Hs][Tf], columns rank-major
  for (int i = 0; i < N; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hs; ++h)
        std::copy_n(drecv + i * dper + (b * Hs + h) * Tl, Tl, delta + (b * Hs + h) * Tf + i * Tl);
  if (x.sinks) kernels::attention_sink_backward(x.dsinks + rank() * Hs, lse, delta, x.sinks + rank() * Hs, B, Tf, Hs);
  // dout of this rank's heads over the whole sequence
  const int64_t gper = B * Tl * Hs * Dv;
  T* gsend = scratch<T>(3, N * gper);
  T* grecv = scratch<T>(10, N * gper);
  for (int j = 0; j < N; ++j)
    for (int64_t row = 0; row < B * Tl; ++row)
      std::copy_n(dout + row * H * Dv + j * Hs * Dv, Hs * Dv, gsend + j * gper + row * Hs * Dv);
  exchange(gsend, grecv, gper, kTagAll);
  T* g = scratch<T>(11, N * gper);
  for (int i = 0; i < N; ++i)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(grecv + i * gper + b * Tl * Hs * Dv, Tl * Hs * Dv, g + (b * N + i) * Tl * Hs * Dv);
  const kernels::AttentionBlock<T> a = gather_heads(qkv, x);
  const int64_t per = B * Tl * Ws;
  T* dfull = scratch<T>(12, N * per);
  std::memset(static_cast<void*>(dfull), 0, sizeof(T) * size_t(N * per));
  kernels::attention_block_backward(dfull, Ws, dfull + Hs * D, dfull + (Hs + KVs) * D, Ws, g, Hs * Dv, lse, delta, a);
  T* send = scratch<T>(1, N * per);
  T* recv = scratch<T>(2, N * per);
  for (int i = 0; i < N; ++i)
    for (int64_t b = 0; b < B; ++b) std::copy_n(dfull + (b * N + i) * Tl * Ws, Tl * Ws, send + i * per + b * Tl * Ws);
  exchange(send, recv, per, kTagAll);
  for (int j = 0; j < N; ++j)  // rank j's heads of this rank's rows: q, k and v columns
    for (int64_t row = 0; row < B * Tl; ++row) {
      const T* x = recv + j * per + row * Ws;
      T* y = dqkv + row * W;
      std::copy_n(x, Hs * D, y + j * Hs * D);
      std::copy_n(x + Hs * D, KVs * D, y + (H + j * KVs) * D);
      std::copy_n(x + (Hs + KVs) * D, KVs * Dv, y + (H + KV) * D + j * KVs * Dv);
    }
}

// ---- the model's calls ---------------------------------------------------

template <typename T>
void ContextParallel::attention_forward(T* out, T* state, const T* qkv, const AttentionArgs<T>& x) {
  if (!group_ && x.head_max) {  // the whole sequence as one block, its heads' largest logits tracked
    const int64_t W = kernels::attention_qkv_width(x.H, x.KV, x.D, x.Dv);
    kernels::AttentionBlock<T> a;
    a.B = x.B, a.Tq = a.Tk = seq_len_, a.H = x.H, a.KV = x.KV, a.D = x.D, a.Dv = x.Dv;
    a.q = qkv, a.ldq = W, a.k = qkv + x.H * x.D, a.v = qkv + (x.H + x.KV) * x.D, a.ldkv = W;
    a.doc_start = x.doc_start, a.window = x.window, a.head_max = x.head_max;
    kernels::attention_block_forward(out, x.H * x.Dv, state, a, false);
    if (x.sinks) kernels::attention_sink_forward(out, x.H * x.Dv, state, x.sinks, x.B, seq_len_, x.H, x.Dv);
    return;
  }
  if (!group_)
    return kernels::attention_forward(out, state, qkv, x.B, seq_len_, x.H, x.KV, x.D, x.Dv, x.doc_start, x.window,
                                      x.sinks);
  Timed timed{traffic_.seconds};
  traffic_.calls += 1;
  if (mode_ == ContextMode::ring)
    ring_forward(out, state, qkv, x);
  else
    all_to_all_forward(out, state, qkv, x);
}

template <typename T>
void ContextParallel::attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* state,
                                         const AttentionArgs<T>& x) {
  if (!group_)
    return kernels::attention_backward(dqkv, dout, qkv, out, state, x.B, seq_len_, x.H, x.KV, x.D, x.Dv, x.doc_start,
                                       x.window, x.sinks, x.dsinks);
  Timed timed{traffic_.seconds};
  traffic_.calls += 1;
  if (mode_ == ContextMode::ring)
    ring_backward(dqkv, dout, qkv, out, state, x);
  else
    all_to_all_backward(dqkv, dout, qkv, out, state, x);
}

template <typename T>
void ContextParallel::attention_state(T* state, T* scratch_out, const T* qkv, const AttentionArgs<T>& x) {
  if (!group_)
    return kernels::attention_lse(state, qkv, x.B, seq_len_, x.H, x.KV, x.D, x.Dv, x.doc_start, x.window, x.sinks);
  attention_forward(scratch_out, state, qkv, x);
}

template <typename T>
void ContextParallel::sum(T* values, int64_t n) {
  if (!group_ || n == 0) return;
  group_->all_reduce(Tensor::borrow(values, n))->wait();
}

#define INSTANTIATE(T)                                                                             \
  template void ContextParallel::sum<T>(T*, int64_t);                                              \
  template void ContextParallel::attention_forward<T>(T*, T*, const T*, const AttentionArgs<T>&);  \
  template void ContextParallel::attention_backward<T>(T*, const T*, const T*, const T*, const T*, \
                                                       const AttentionArgs<T>&);                   \
  template void ContextParallel::attention_state<T>(T*, T*, const T*, const AttentionArgs<T>&);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::parallel
