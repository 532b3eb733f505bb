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

// Aux-loss-free balancing: a bias range moves by rate x sign(mean - count)
// from the counts in its gradient slot, whatever the gradient scale, and a
// ZeRO shard steps its part only; AdamW's ranges around it are unaffected.
TEST(Optim, BiasRangesMoveBySignOfTheLoadGap) {
  OptimConfig cfg;
  cfg.lr = 0.1;
  const std::vector<kernels::AdamWRange> adam = {{0, 2, 0.0}, {6, 2, 0.0}};
  const std::vector<kernels::BiasRange> bias = {{2, 4, 0.01, 3.0}};
  std::vector<float> p = {1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 1, 1};
  const std::vector<float> g = {0.1f, 0.1f, 1, 3, 5, 0, 0.1f, 0.1f};  // counts 1, 3, 5, 0 against a mean of 3
  AdamW<float> whole(adam, cfg, 0, 8, {}, bias);
  whole.step(p.data(), g.data(), 0.1, 1, /*grad_scale=*/0.25);
  EXPECT_FLOAT_EQ(p[2], 0.51f);  // under-loaded: up
  EXPECT_FLOAT_EQ(p[3], 0.5f);   // balanced: stays
  EXPECT_FLOAT_EQ(p[4], 0.49f);  // over-loaded: down
  EXPECT_FLOAT_EQ(p[5], 0.51f);
  EXPECT_LT(p[0], 1.0f);  // AdamW stepped the rest
  EXPECT_LT(p[7], 1.0f);
  // a shard [3, 8): its part of the bias only, the same numbers
  std::vector<float> q = {1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 1, 1};
  AdamW<float> shard(adam, cfg, 3, 8, {}, bias);
  shard.step(q.data() + 3, g.data() + 3, 0.1, 1, 0.25);
  EXPECT_EQ(q[2], 0.5f);
  for (int i = 3; i < 8; ++i) EXPECT_EQ(q[size_t(i)], p[size_t(i)]) << i;
}

}  // namespace trident::optim
