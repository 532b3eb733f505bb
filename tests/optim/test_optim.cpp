// LR schedules at their defining points, decay ranges, gradient clipping.
#include <cmath>

#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "tests/test_util.hpp"

namespace trident::optim {

OptimConfig sched(const std::string& decay) {
  OptimConfig o;
  o.lr = 1.0, o.min_lr = 0.1, o.warmup = 10, o.decay = *parse_enum<LrDecay>(decay), o.wsd_decay_fraction = 0.2;
  return o;
}

TEST(LrSchedule, Warmup) {
  for (std::string d : {"constant", "cosine", "linear", "wsd"}) {
    EXPECT_DOUBLE_EQ(learning_rate(sched(d), 0, 110), 0.1) << d;
    EXPECT_DOUBLE_EQ(learning_rate(sched(d), 4, 110), 0.5) << d;
    EXPECT_DOUBLE_EQ(learning_rate(sched(d), 9, 110), 1.0) << d;
  }
}
TEST(LrSchedule, Cosine) {
  OptimConfig o = sched("cosine");
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(o, 60, 110), 0.55, 1e-12);  // half way: (lr + min) / 2
  EXPECT_NEAR(learning_rate(o, 110, 110), 0.1, 1e-12);
  EXPECT_GT(learning_rate(o, 30, 110), learning_rate(o, 31, 110));
}
TEST(LrSchedule, Linear) {
  OptimConfig o = sched("linear");
  EXPECT_NEAR(learning_rate(o, 60, 110), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(o, 85, 110), 0.325, 1e-12);
}
TEST(LrSchedule, ConstantAndWsd) {
  EXPECT_DOUBLE_EQ(learning_rate(sched("constant"), 100, 110), 1.0);
  OptimConfig o = sched("wsd");  // 100 steps: decay over the last 20
  EXPECT_DOUBLE_EQ(learning_rate(o, 79, 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 80, 100), 1.0);
  EXPECT_NEAR(learning_rate(o, 90, 100), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(o, 99, 100), 0.145, 1e-12);
}

TEST(Optim, ClipToGlobalNorm) {
  std::vector<float> g = {3, 4, 0, 0};
  EXPECT_NEAR(clip_grad_norm(g.data(), 4, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(std::sqrt(g[0] * g[0] + g[1] * g[1]), 1.0, 1e-5);
  std::vector<float> h = {0.3f, 0.4f};
  clip_grad_norm(h.data(), 2, 1.0);  // below the limit: untouched
  EXPECT_FLOAT_EQ(h[0], 0.3f);
  EXPECT_DOUBLE_EQ(clip_scale(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(5.0, 0.0), 1.0);
  std::vector<double> big(300000, 1e-3);
  EXPECT_NEAR(sum_of_squares(big.data(), 300000), 0.3, 1e-12);
}

}  // namespace trident::optim
