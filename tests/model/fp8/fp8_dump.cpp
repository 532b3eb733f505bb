// The FP8 numerics of kernels/fp8.hpp on a given tensor, written to files
// for tests/model/fp8/check.py to compare with PyTorch's casts, torchao's
// tensorwise scaling and DeepSeek-V3's blockwise quantisation.
//   fp8_dump IN.f32 ROWS COLS OUT_DIR
// IN.f32: ROWS x COLS float32 (row-major). Writes into OUT_DIR, for each
// format F in {e4m3, e5m2}: cast_F.u8 and sat_F.u8 (every value cast, and
// cast saturated), decode_F.f32 (the 256 codes), tensorwise_F[_pow2].u8
// with .scale.f32 and .dequant.f32; tiles[_pow2].u8 / .scale.f32 /
// .dequant.f32 (1 x 128) and blocks[_pow2] likewise (128 x 128); and
// delayed.f32: the scale after each of the first 64 values' magnitudes
// joins a history of 4 (margin 1, e4m3).
//   fp8_dump --linear N C OC DIR
// The model's linear layer (model::LayerOps with train.fp8) under each
// recipe R: DIR/x.f32 [N, C], w.f32 [OC, C], g.f32 [N, OC] (the output's
// gradient) -> out_R_S.f32, dx_R_S.f32, dw_R_S.f32 for steps S = 1, 2
// (the same tensors; delayed scaling's second step casts with the first's
// amaxes). R: tensorwise_hybrid, tensorwise_e4m3, delayed_hybrid,
// blockwise, blockwise_pow2.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/fp8.hpp"
#include "model/layer_ops.hpp"

namespace fp8 = trident::kernels::fp8;

template <typename T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

std::vector<float> read(const std::string& path, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4))) {
    std::fprintf(stderr, "%s: expected %lld float32 values\n", path.c_str(), static_cast<long long>(n));
    std::exit(2);
  }
  return v;
}

// The model's linear (model::LayerOps, the FP8 GEMMs of train.fp8) on one
// rank: forward, then the input and weight gradients, twice (a step, then
// the next: delayed scaling casts the second with the first's amaxes).
int linear(int64_t N, int64_t C, int64_t OC, const std::string& dir) {
  using namespace trident;
  const std::vector<float> x = read(dir + "/x.f32", N * C), w = read(dir + "/w.f32", OC * C),
                           g = read(dir + "/g.f32", N * OC);
  ModelConfig cfg;
  cfg.arch = Arch::llama, cfg.layers = 1, cfg.hidden = C, cfg.heads = 1, cfg.kv_heads = 1, cfg.ffn_hidden = OC;
  cfg.seq_len = N, cfg.vocab = 2;
  const model::LocalDims dims = model::local_dims(cfg, {});
  parallel::TensorParallel tp(nullptr, false);
  parallel::ContextParallel cp(nullptr, ContextMode::ring, N);
  struct Case {
    const char* name;
    Fp8Recipe recipe;
    Fp8Format format;
    bool pow2;
  };
  for (const Case& c : {Case{"tensorwise_hybrid", Fp8Recipe::tensorwise, Fp8Format::hybrid, false},
                        Case{"tensorwise_e4m3", Fp8Recipe::tensorwise, Fp8Format::e4m3, false},
                        Case{"delayed_hybrid", Fp8Recipe::delayed, Fp8Format::hybrid, false},
                        Case{"blockwise", Fp8Recipe::blockwise, Fp8Format::e4m3, false},
                        Case{"blockwise_pow2", Fp8Recipe::blockwise, Fp8Format::e4m3, true}}) {
    model::LayerOps<float> ops(cfg, dims, tp, cp, Device{}, kernels::Precision::bf16);
    Fp8Config f;
    f.recipe = c.recipe, f.format = c.format, f.power_of_two = c.pow2, f.amax_history = 4;
    ops.fp8 = std::make_unique<model::Fp8Linears>(f, 1, std::vector<int64_t>{0}, tp, cp);
    const model::LinearSite site{0, model::Linear::fc};
    for (int step = 1; step <= 2; ++step) {
      std::vector<float> out(static_cast<size_t>(N * OC)), dx(x.size()), dw(w.size());
      ops.fp8->set_training(true);
      ops.linear_fwd(out.data(), {x.data()}, {w.data()}, nullptr, N, C, OC, site);
      ops.linear_bwd(dx.data(), dw.data(), nullptr, {g.data()}, {x.data()}, {w.data()}, N, C, OC, false, site);
      ops.fp8->end_step(nullptr);
      const std::string tag = std::string(c.name) + "_" + std::to_string(step) + ".f32";
      write(dir + "/out_" + tag, out);
      write(dir + "/dx_" + tag, dx);
      write(dir + "/dw_" + tag, dw);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--linear")
    return linear(std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]), argv[5]);
  if (argc != 5) {
    std::fprintf(stderr, "usage: fp8_dump IN.f32 ROWS COLS OUT_DIR\n");
    return 2;
  }
  const int64_t rows = std::atoll(argv[2]), cols = std::atoll(argv[3]), n = rows * cols;
  const std::string out = argv[4];
  std::vector<float> x(static_cast<size_t>(n));
  std::ifstream in(argv[1], std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(x.data()), std::streamsize(n * 4))) {
    std::fprintf(stderr, "%s: expected %lld float32 values\n", argv[1], static_cast<long long>(n));
    return 2;
  }
  for (auto [f, name] : {std::pair{fp8::Format::e4m3, "e4m3"}, std::pair{fp8::Format::e5m2, "e5m2"}}) {
    std::vector<uint8_t> cast(x.size()), sat(x.size());
    for (size_t i = 0; i < x.size(); ++i) cast[i] = fp8::encode(f, x[i]), sat[i] = fp8::encode_saturated(f, x[i]);
    write(out + "/cast_" + name + ".u8", cast);
    write(out + "/sat_" + name + ".u8", sat);
    std::vector<float> codes(256);
    for (int b = 0; b < 256; ++b) codes[size_t(b)] = fp8::decode(f, uint8_t(b));
    write(out + "/decode_" + name + ".f32", codes);
    for (bool pow2 : {false, true}) {
      const std::string base = out + "/tensorwise_" + name + (pow2 ? "_pow2" : "");
      const float scale = fp8::tensorwise_scale(f, fp8::amax(x.data(), n), pow2);
      std::vector<uint8_t> q(x.size());
      std::vector<float> back(x.size());
      fp8::quantize(f, x.data(), n, scale, q.data());
      fp8::dequantize(f, q.data(), n, scale, back.data());
      write(base + ".u8", q);
      write(base + ".scale.f32", std::vector<float>{scale});
      write(base + ".dequant.f32", back);
    }
  }
  for (bool pow2 : {false, true}) {
    for (bool square : {false, true}) {
      const std::string base = out + (square ? "/blocks" : "/tiles") + (pow2 ? "_pow2" : "");
      std::vector<uint8_t> q(x.size());
      std::vector<float> back(x.size());
      std::vector<float> scales(static_cast<size_t>(square ? (rows / 128) * (cols / 128) : rows * (cols / 128)));
      if (square) {
        fp8::quantize_blocks(x.data(), rows, cols, pow2, q.data(), scales.data());
        fp8::dequantize_blocks(q.data(), rows, cols, scales.data(), back.data());
      } else {
        fp8::quantize_tiles(x.data(), rows, cols, pow2, q.data(), scales.data());
        fp8::dequantize_tiles(q.data(), rows, cols, scales.data(), back.data());
      }
      write(base + ".u8", q);
      write(base + ".scale.f32", scales);
      write(base + ".dequant.f32", back);
    }
  }
  fp8::DelayedScale d;
  d.history = 4, d.margin = 1;
  std::vector<float> scales;
  for (int i = 0; i < 64 && i < n; ++i) {
    d.update(std::abs(x[size_t(i)]));
    scales.push_back(d.scale);
  }
  write(out + "/delayed.f32", scales);
  return 0;
}
