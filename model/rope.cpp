// Rotary frequencies (model/rope.hpp), formula by formula as transformers'
// _compute_*_parameters (in double where transformers uses float32).
#include "model/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/rotary.hpp"

namespace trident::model {

namespace {

// YaRN's mscale (arXiv 2309.00071, Eq. 21): 0.1 m ln s + 1, 1 for s <= 1
double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

// the dimension whose wavelength makes `rotations` turns over `positions`
double correction_dim(double rotations, double dim, double base, double positions) {
  return dim * std::log(positions / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& m, int64_t dim) {
  const RopeScaling& s = m.rope_scaling;
  const double base = m.rope_theta, factor = s.factor;
  const int64_t half = dim / 2;
  RopeFrequencies r;
  r.inv_freq.resize(size_t(half));
  for (int64_t i = 0; i < half; ++i) r.inv_freq[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(dim));
  switch (s.type) {
    case RopeType::none:
      for (int64_t i = 0; i < half; ++i)  // as kernels::rope_table(T, D, theta) has always computed them
        r.inv_freq[size_t(i)] = std::pow(base, -2.0 * double(i) / double(dim));
      return r;
    case RopeType::linear:
      for (double& f : r.inv_freq) f /= factor;
      break;
    case RopeType::llama3: {
      const double old = double(s.original_seq_len), low_wavelen = old / s.low_freq_factor;
      const double high_wavelen = old / s.high_freq_factor;
      for (double& f : r.inv_freq) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= factor;
        } else if (!(wavelen < high_wavelen)) {  // between: a smooth blend
          const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / factor + smooth * f;
        }
      }
      break;
    }
    case RopeType::yarn: {
      r.attention_factor = s.mscale != 0 && s.mscale_all_dim != 0
                               ? yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim)
                               : yarn_mscale(factor, 1.0);
      const double positions = double(s.original_seq_len);
      double low = correction_dim(s.beta_fast, double(dim), base, positions);
      double high = correction_dim(s.beta_slow, double(dim), base, positions);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
      if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolate = 1 - ramp, f = r.inv_freq[size_t(i)];
        r.inv_freq[size_t(i)] = f / factor * (1 - extrapolate) + f * extrapolate;
      }
      break;
    }
  }
  if (s.mscale_all_dim != 0) r.softmax_factor = std::pow(yarn_mscale(factor, s.mscale_all_dim), 2);
  return r;
}

std::vector<double> rope_table(const ModelConfig& m, int64_t dim) {
  const RopeFrequencies f = rope_frequencies(m, dim);
  return kernels::rope_table(m.seq_len, f.inv_freq, f.attention_factor);
}

}  // namespace trident::model
