// The FP8 numerics of kernels/fp8.hpp on a given tensor, written to files
// for tests/kernels/fp8/check.py to compare with PyTorch's casts, torchao's
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
// A linear layer's three GEMMs emulated in FP8 with tensorwise scaling:
// DIR/x.f32 [N, C], w.f32 [OC, C], g.f32 [N, OC] (the output's gradient)
// -> out_F.f32 = x' w'^T, dx_F.f32 = g' w', dw_F.f32 = g'^T x', where '
// is fake quantisation (input and weight e4m3; the gradient e5m2 for F =
// hybrid, e4m3 for F = e4m3).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"

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

// The fake-quantised copy of x, tensorwise.
std::vector<float> fake(fp8::Format f, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  fp8::fake_quantize(f, x.data(), int64_t(x.size()), fp8::tensorwise_scale(f, fp8::amax(x.data(), int64_t(x.size()))),
                     y.data());
  return y;
}

int linear(int64_t N, int64_t C, int64_t OC, const std::string& dir) {
  const std::vector<float> x = read(dir + "/x.f32", N * C), w = read(dir + "/w.f32", OC * C),
                           g = read(dir + "/g.f32", N * OC);
  for (auto [grad, name] : {std::pair{fp8::Format::e5m2, "hybrid"}, std::pair{fp8::Format::e4m3, "e4m3"}}) {
    const std::vector<float> xq = fake(fp8::Format::e4m3, x), wq = fake(fp8::Format::e4m3, w), gq = fake(grad, g);
    std::vector<float> out(static_cast<size_t>(N * OC)), dx(x.size()), dw(w.size());
    trident::kernels::linear_forward(out.data(), xq.data(), wq.data(), static_cast<const float*>(nullptr), N, C, OC);
    trident::kernels::linear_backward(dx.data(), dw.data(), static_cast<float*>(nullptr), gq.data(), xq.data(),
                                      wq.data(), N, C, OC, false);
    write(dir + "/out_" + name + ".f32", out);
    write(dir + "/dx_" + name + ".f32", dx);
    write(dir + "/dw_" + name + ".f32", dw);
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
