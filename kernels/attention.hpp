// Causal multi-head attention with grouped-query heads (H query heads share
// KV key/value heads, H % KV == 0; KV == H is plain multi-head attention).
// Shapes: B batch, T sequence, H query heads, KV key/value heads, D the
// query/key head size, Dv the value head size (D too, but for multi-head
// latent attention: queries and keys of 192, values of 128).
// qkv[B,T,(H+KV)*D + KV*Dv] holds per token [q heads | k heads | v heads];
// the output [B,T,H*Dv] has one value-sized head per query head.
// The state forward saves for backward is each row's log-sum-exp lse[B,H,T]
// (attention_state_elements()): both the CPU and the CUDA kernels are tiled
// with an online softmax and never hold a T x T matrix; backward recomputes
// the probabilities tile by tile from q, k and the lse. attention_lse
// refills the state alone (selective recompute).
// Backward reads out (the forward's output) and overwrites dqkv. Scale is 1/sqrt(D).
// doc_start[B*T] (optional, document masking): the first position of the
// document holding row (b, t); query t then sees keys [doc_start, t] only.
// window > 0 (sliding-window attention, transformers' sliding_window): query
// t sees only keys s with t - s < window, both masks together when both are
// set; the kernels skip the key tiles wholly outside the window.
//
// Attention sinks (gpt-oss): one learned logit per head joins each row's
// softmax denominator and takes no value. attention_sink_forward folds it
// into a finished (out, lse) — after the last block, under context
// parallelism — and the backward passes then read the folded lse;
// attention_sink_backward gives the sinks' gradient.
//
// Blocks (context parallelism, CPU): queries of one part of a sequence
// against the keys and values of another part, each row at its global
// position. A key is visible to a query when k_pos <= q_pos (causal) and
// k_pos >= the query's doc_start (document masking, global positions).
// attention_block_forward merges its result into (out, lse) with the
// log-sum-exp rule, so blocks may come in any order; a row that has seen
// no visible key yet has lse = -inf and out = 0. attention_block_backward
// adds the block's contributions to dq, dk and dv, given the final out's
// row dot products delta = sum_d dout * out (attention_delta) and the
// final lse.
#pragma once
#include <cstdint>

namespace trident::kernels {

int64_t attention_state_elements(int64_t B, int64_t T_, int64_t H);
// A qkv row's width: (H + KV) D + KV Dv
int64_t attention_qkv_width(int64_t H, int64_t KV, int64_t D, int64_t Dv);

// The whole sequence: sinks[H] (or null) folded in by attention_sink_forward;
// the backward adds the sinks' gradient to dsinks[H] when sinks is given.
template <typename T>
void attention_lse(T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, int64_t Dv,
                   const int32_t* doc_start = nullptr, int64_t window = 0, const T* sinks = nullptr);

// out[B,T,H*Dv]; lse[B,H,T]
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       int64_t Dv, const int32_t* doc_start = nullptr, int64_t window = 0, const T* sinks = nullptr);

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start = nullptr,
                        int64_t window = 0, const T* sinks = nullptr, T* dsinks = nullptr);

// Rows [B,Tq] of H heads: lse[B,H,Tq] := log(exp(lse) + exp(sinks[h])) and
// each head's output (Dv values, rows of stride ldo; out may be null) scaled
// by exp(old lse - new lse).
template <typename T>
void attention_sink_forward(T* out, int64_t ldo, T* lse, const T* sinks, int64_t B, int64_t Tq, int64_t H, int64_t Dv);

// dsinks[h] -= sum over rows of exp(sinks[h] - lse) * delta, with the
// folded lse[B,H,Tq] and delta[B,H,Tq] = dout . out (attention_delta);
// dsinks is added to.
template <typename T>
void attention_sink_backward(T* dsinks, const T* lse, const T* delta, const T* sinks, int64_t B, int64_t Tq, int64_t H);

// One block: queries [B,Tq] (row stride ldq, head h at h*D, batch stride
// Tq*ldq) against keys [B,Tk] (row stride ldkv, KV head j at j*D, batch
// stride Tk*ldkv) and values (the same rows, KV head j at j*Dv). Both head
// sizes must be set. Positions null: 0, 1, 2, ...
template <typename T>
struct AttentionBlock {
  int64_t B = 1, Tq = 0, Tk = 0, H = 1, KV = 1, D = 0, Dv = 0;
  const T* q = nullptr;
  int64_t ldq = 0;
  const T *k = nullptr, *v = nullptr;
  int64_t ldkv = 0;
  const int32_t* q_pos = nullptr;      // [Tq]
  const int32_t* k_pos = nullptr;      // [Tk]
  const int32_t* doc_start = nullptr;  // [B*Tq], in the positions' terms
  int64_t window = 0;                  // > 0: keys with q_pos - k_pos < window only
  // QK-clip (docs/optim.md#qk-clip; CPU): [H] each head's largest logit (the
  // scaled q . k of a visible key; the sinks are not logits) max'ed in, or null
  T* head_max = nullptr;
};

// out[B,Tq,H*Dv] (row stride ldo), lse[B,H,Tq]; merge = false overwrites them.
template <typename T>
void attention_block_forward(T* out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge);

// delta[B,H,Tq] = sum over d < D of dout * out, per head of D values (rows of stride ldo)
template <typename T>
void attention_delta(T* delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H, int64_t D);

// dq[B,Tq] (stride lddq), dk and dv [B,Tk] (stride lddkv), all +=.
template <typename T>
void attention_block_backward(T* dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo,
                              const T* lse, const T* delta, const AttentionBlock<T>& a);

}  // namespace trident::kernels
