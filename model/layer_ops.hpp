// What every part of a layer calls (model/attention.hpp, model/mlp.hpp,
// model/mtp.hpp, and the model around them): the model's configuration and
// this rank's share of it, the tensor- and context-parallel regions, where
// buffers live and how activations are stored (train.precision), the
// linears' GEMMs with the CPU bf16 path's 2-byte operands, the model's norm,
// and the layout of a layer's packed saved activations. The model owns one;
// its parts hold a reference.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "kernels/precision.hpp"
#include "model/activations.hpp"
#include "model/architecture.hpp"
#include "model/fp8_linear.hpp"
#include "model/layer_params.hpp"
#include "model/parallel_plan.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

template <typename T>
class LayerOps {
 public:
  LayerOps(const ModelConfig& cfg, const LocalDims& dims, parallel::TensorParallel& tp, parallel::ContextParallel& cp,
           Device device, kernels::Precision precision);

  const ModelConfig& cfg() const { return cfg_; }
  const LocalDims& dims() const { return dims_; }
  const Architecture& arch() const { return arch_; }
  parallel::TensorParallel& tp() const { return tp_; }
  parallel::ContextParallel& cp() const { return cp_; }
  Device device() const { return device_; }
  kernels::Precision precision() const { return precision_; }
  int64_t seq() const { return cp_.local_len(); }  // rows of each sequence on this rank
  // a query (and key) head's size, a value head's; the attention kernels'
  // q|k|v row width [(H + 2 KV) D] (MLA: H (2 Dq + Dv)); the MLP's input width
  int64_t dq() const { return dq_; }
  int64_t dv() const { return dv_; }
  int64_t qkv_width() const { return qkv_width_; }
  int64_t fc_width() const { return fc_width_; }

  // The CPU's bf16 path (docs/precision.md): under bf16, in host memory, the
  // GEMMs read 2-byte operands where the model has them: the saved
  // activations' packed copy, the output gradients' copy (the weights are
  // converted by each GEMM: measured faster than a copy, docs/performance.md).
  // The precision tests turn the copies off to prove the results bitwise equal.
  // (never with FP8 GEMMs, which read their quantised copies)
  bool copies = true;
  bool gemm_reads_16bit() const;

  // train.fp8 (model/fp8_linear.hpp): set by the model when it is built;
  // null: every GEMM in the training precision.
  std::unique_ptr<Fp8Linears> fp8;
  bool fp8_applies(LinearSite s) const { return fp8 && fp8->applies(s); }

  // rounds n elements at p to the storage format (a no-op in fp32)
  void store(T* p, int64_t n) const { kernels::round_to_storage(p, n, precision_); }
  // an output gradient the GEMMs read: rounded, and on the CPU's bf16 path
  // its 2-byte copy written in the same pass (copy16, n elements)
  void store_grad(T* p, uint16_t* copy16, int64_t n) const;
  // at least n elements of scratch in t (activation memory, on the model's device)
  T* scratch(Tensor& t, int64_t n) const;

  // A linear's GEMMs; site: which layer's which linear (FP8 where train.fp8 says so);
  // keep: where the forward leaves its input's FP8 codes (train.fp8.saved_inputs; null: none).
  void linear_fwd(T* out, GemmIn<T> inp, GemmIn<T> w, const T* bias, int64_t N, int64_t C, int64_t OC,
                  LinearSite site = {}, Fp8Input* keep = nullptr) const;
  void linear_bwd(T* dinp, T* dw, T* db, GemmIn<T> dout, GemmIn<T> inp, GemmIn<T> w, int64_t N, int64_t C, int64_t OC,
                  bool acc, LinearSite site = {}) const;
  // FP8 operands' scratch (activation memory): slot 0 inputs, 1 weights, 2 gradients
  float* fp8_scratch(int slot, int64_t n) const;
  uint8_t* fp8_codes(int slot, int64_t n) const;  // tensorwise and delayed: the operands' codes
  // the model's norm (model.norm) over rows of the hidden size
  void norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N) const;
  void norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                     int64_t N, bool accumulate) const;

  // 16-bit precision: a layer's saved buffers in pack order (buffer in the
  // working set, elements): x_in, ln1_full, qkv, atty, x_mid, ln2_full, fc,
  // act (x_in alone with full recompute).
  enum Saved : size_t { x_in, ln1_full, qkv, atty, x_mid, ln2_full, fc, act };
  std::vector<std::pair<T*, int64_t>> saved_buffers(const LayerActs<T>& a, int64_t B, Recompute r) const;
  // Buffers [first, last) of layer l to its packed copy, and all of them back.
  void pack(Activations<T>& ctx, int l, size_t first, size_t last) const;
  void unpack(Activations<T>& ctx, int l) const;
  // The dweight input i of layer l (saved_buffers order): fp32 and/or packed, or its FP8 codes.
  GemmIn<T> saved_in(const Activations<T>& ctx, int l, size_t i, const T* f32) const;

  // train.fp8.saved_inputs (model/fp8_linear.hpp's fp8_kept_inputs): saved
  // buffer i of a layer's where it is kept as FP8 codes, else null
  Fp8Input* fp8_input(const LayerActs<T>& a, size_t i) const;

 private:
  // Whether saved buffer i is left packed in backward (only GEMMs read it).
  bool gemm_only(const Activations<T>& ctx, size_t i) const;

  const ModelConfig& cfg_;
  const LocalDims& dims_;
  const Architecture& arch_;
  parallel::TensorParallel& tp_;
  parallel::ContextParallel& cp_;
  Device device_;
  kernels::Precision precision_;
  int64_t dq_, dv_, qkv_width_, fc_width_;
  mutable Tensor fp8_scratch_[3], fp8_codes_[3];
};

}  // namespace trident::model
