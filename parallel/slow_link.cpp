// A slow network between simulated nodes (see slow_link.hpp).
#include "parallel/slow_link.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace trident::parallel {

namespace {

// The operation underneath, done no sooner than `until`.
class DelayedWork final : public Work {
 public:
  DelayedWork(WorkPtr inner, std::chrono::steady_clock::time_point until) : inner_(std::move(inner)), until_(until) {}
  void wait() override {
    inner_->wait();
    while (std::chrono::steady_clock::now() < until_) inner_->is_completed();  // the link is still carrying it
  }
  bool is_completed() override { return inner_->is_completed() && std::chrono::steady_clock::now() >= until_; }
  std::string diagnose_timeout() override { return inner_->diagnose_timeout(); }

 private:
  WorkPtr inner_;
  std::chrono::steady_clock::time_point until_;
};

}  // namespace

std::optional<SlowLink> slow_link_from_env() {
  const char* v = std::getenv("TRIDENT_SLOW_LINK");
  if (!v || !*v) return std::nullopt;
  SlowLink l;
  double gbps = 0, us = 0;
  int n = 0;
  if (std::sscanf(v, "%d:%lf%n", &l.ranks_per_node, &gbps, &n) < 2 || l.ranks_per_node < 1 || gbps <= 0)
    fail_input("TRIDENT_SLOW_LINK: expected RANKS_PER_NODE:GBPS[:LATENCY_US] (e.g. 4:0.1), found '{}'", v);
  if (v[n] == ':' && (std::sscanf(v + n + 1, "%lf", &us) != 1 || us < 0))
    fail_input("TRIDENT_SLOW_LINK: expected a latency in microseconds after the second ':', found '{}'", v);
  l.bytes_per_s = gbps * 1e9, l.latency_s = us * 1e-6;
  return l;
}

WorkPtr SlowLinkCommunicator::delay(WorkPtr w, double before) {
  const double bytes = inner_->bytes() - before;
  const auto now = Clock::now();
  if (free_at_ < now) free_at_ = now;
  free_at_ += std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(link_.latency_s + bytes / link_.bytes_per_s));
  return std::make_unique<DelayedWork>(std::move(w), free_at_);
}

}  // namespace trident::parallel
