// Mixed precision: the storage formats of train.precision and the overflow
// check of fp16's dynamic loss scaling.
// round_to_storage: each element becomes the nearest value of the storage
// format (round to nearest even; fp16 overflows to +-inf and goes subnormal
// below 2^-14; NaN stays NaN). It is how the CPU holds bf16/fp16 values:
// fp32 containers whose contents are exactly representable in the storage
// format, so the numerics are those of bf16/fp16 storage with fp32 math
// (the memory is not halved; on CUDA the buffers are real bf16/fp16).
// count_nonfinite: the number of inf/NaN elements.
#pragma once
#include <cstdint>
#include <string>

#include "core/enums.hpp"

namespace trident::kernels {

using trident::Precision;  // train.precision: fp32 | bf16 | fp16
inline const char* precision_name(Precision p) { return enum_name(p); }

template <typename T>
void round_to_storage(T* x, int64_t n, Precision p);

template <typename T>
int64_t count_nonfinite(const T* x, int64_t n);

// 2-byte storage of values already rounded to the format (round_to_storage):
// dst[i] = the bf16 / fp16 bit pattern of src[i], and back; exact both ways.
// How the model keeps the activations saved for backward under bf16/fp16.
template <typename T>
void pack_16(uint16_t* dst, const T* src, int64_t n, Precision p);
template <typename T>
void unpack_16(T* dst, const uint16_t* src, int64_t n, Precision p);
// Both at once, one pass: x is rounded to the format in place and dst gets
// its 2-byte pattern (the copy the CPU's bf16 GEMMs read, kernels/gemm.hpp).
template <typename T>
void store_16(T* x, uint16_t* dst, int64_t n, Precision p);

// One element (tests, scalars).
float round_bf16(float x);
float round_fp16(float x);

}  // namespace trident::kernels
