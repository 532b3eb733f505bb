// Token embedding over a range of the vocabulary, and learned positions.
// Shapes: N rows (tokens, B x T flattened), C channels, T sequence length.
// A rank may hold only the rows [vocab_begin, vocab_begin + V) of the token
// table (vocab-parallel embedding): tokens outside give zero rows forward and
// no gradient. With the whole table, vocab_begin = 0 and V = the table's rows.
// Backward accumulates (+=) into dwte and dwpe.
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[N,C] = wte[tokens[n] - vocab_begin] if the token is in range, else 0
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V);
// dwte[V,C] += dout[n] for every in-range token n
template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_begin,
                        int64_t V);

// Rows [row_begin, row_begin + rows) of a flattened [B,T] batch (a sequence
// shard): out[i] = inp[i] + wpe[(row_begin + i) % T]. out may equal inp;
// wpe null: a plain copy. doc_start[B*T] (optional, indexed by the batch row
// row_begin + i): the position is (row % T) - doc_start[row] instead.
template <typename T>
void position_forward(T* out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                      const int32_t* doc_start = nullptr);
// dwpe[T,C] += dout[i] at position (row_begin + i) % T
template <typename T>
void position_backward(T* dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                       const int32_t* doc_start = nullptr);

}  // namespace trident::kernels
