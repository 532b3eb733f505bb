// Pipeline schedules and their simulator (see schedule.hpp).
#include "parallel/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "core/schedule_rules.hpp"

namespace trident::parallel {

ScheduleKind parse_schedule(const std::string& name) {
  if (const auto kind = parse_enum<ScheduleKind>(name)) return *kind;
  fail_input("schedule: expected {}, found '{}'", enum_choices<ScheduleKind>(), name);
}

int global_chunk(ScheduleKind kind, int P, int v, int p) {
  if (kind == ScheduleKind::dualpipev) return v == 0 ? p : 2 * P - 1 - p;
  return v * P + p;
}

int chunk_rank(ScheduleKind kind, int P, int c) {
  if (kind == ScheduleKind::dualpipev) return c < P ? c : 2 * P - 1 - c;
  return c % P;
}

std::vector<Action> make_forward_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches,
                                          int rank) {
  std::vector<Action> out;
  const int last_chunk = stages * virtual_stages - 1;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int v = 0; v < virtual_stages; ++v) {
      const int c = global_chunk(kind, stages, v, rank);
      if (c > 0) out.push_back({ActionType::recv_act, v, mb});
      out.push_back({ActionType::forward, v, mb});
      if (c < last_chunk) out.push_back({ActionType::send_act, v, mb});
    }
  return out;
}

std::vector<Action> compute_steps(const std::vector<Action>& actions) {
  std::vector<Action> out;
  for (const Action& a : actions) {
    if (a.type == ActionType::paired)
      out.push_back(paired_forward(a)), out.push_back(paired_backward(a));
    else if (is_compute(a.type))
      out.push_back(a);
  }
  return out;
}

std::vector<int> in_flight_per_chunk(const std::vector<Action>& actions, int chunks) {
  std::vector<int> live(size_t(chunks), 0), peak(size_t(chunks), 0);
  for (const auto& a : compute_steps(actions)) {
    const size_t c = size_t(a.chunk);
    if (a.type == ActionType::forward) peak[c] = std::max(peak[c], ++live[c]);
    if (a.type == ActionType::backward || a.type == ActionType::backward_weight) --live[c];
  }
  return peak;
}

bool is_compute(ActionType t) {
  return t == ActionType::forward || t == ActionType::backward || t == ActionType::backward_input ||
         t == ActionType::backward_weight || t == ActionType::paired;
}

void validate_schedule(ScheduleKind kind, int P, int V, int M) {
  if (P < 1 || V < 1 || M < 1)
    fail_input("schedule: pipeline({}), virtual_stages({}) and micro-batches({}) must be >= 1", P, V, M);
  if (const auto broken = broken_schedule_rule(kind, P, V, M)) fail_input("{}", broken->message);
}

namespace {

using A = ActionType;

std::vector<Action> one_f_one_b(int P, int M, int p) {
  std::vector<Action> out;
  const int warm = std::min(P - p - 1, M);
  for (int m = 0; m < warm; ++m) out.push_back({A::forward, 0, m});
  for (int i = 0; i < M - warm; ++i) out.push_back({A::forward, 0, warm + i}), out.push_back({A::backward, 0, i});
  for (int m = M - warm; m < M; ++m) out.push_back({A::backward, 0, m});
  return out;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving.
std::vector<Action> interleaved(int P, int V, int M, int p) {
  const int total = M * V;
  auto micro = [&](int k) { return (k / (P * V)) * P + k % P; };
  auto fchunk = [&](int k) { return (k % (P * V)) / P; };
  auto bchunk = [&](int k) { return V - 1 - (k % (P * V)) / P; };
  const int warm = std::min((P - p - 1) * 2 + (V - 1) * P, total);
  std::vector<Action> out;
  for (int k = 0; k < warm; ++k) out.push_back({A::forward, fchunk(k), micro(k)});
  for (int i = 0; i < total - warm; ++i) {
    out.push_back({A::forward, fchunk(warm + i), micro(warm + i)});
    out.push_back({A::backward, bchunk(i), micro(i)});
  }
  for (int k = total - warm; k < total; ++k) out.push_back({A::backward, bchunk(k), micro(k)});
  return out;
}

// ZB-H1 by list scheduling with unit costs: when a rank is free it runs the
// oldest ready input-gradient pass, else the next forward if fewer than
// P - p micro-batches are in flight, else the oldest pending weight pass.
std::vector<std::vector<Action>> zero_bubble_all(int P, int M) {
  std::vector<std::vector<Action>> out(static_cast<size_t>(P));
  const double kNever = 1e300;
  std::vector<std::vector<double>> f_end(size_t(P), std::vector<double>(size_t(M), kNever)), b_end = f_end;
  std::vector<int> next_f(size_t(P), 0), next_b(size_t(P), 0), next_w(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0);
  int done = 0;
  for (int t = 0; done < 3 * P * M; ++t) {
    for (int p = 0; p < P; ++p) {
      if (free_at[size_t(p)] > t) continue;
      const int nb = next_b[size_t(p)], nf = next_f[size_t(p)], nw = next_w[size_t(p)];
      const bool b_ready =
          nb < nf && (p == P - 1 ? f_end[size_t(p)][size_t(nb)] <= t : b_end[size_t(p + 1)][size_t(nb)] <= t);
      const bool f_ready = nf < M && nf - nw < P - p && (p == 0 || f_end[size_t(p - 1)][size_t(nf)] <= t);
      const bool w_ready = nw < nb;
      if (b_ready) {
        out[size_t(p)].push_back({A::backward_input, 0, nb});
        b_end[size_t(p)][size_t(nb)] = t + 1, ++next_b[size_t(p)];
      } else if (f_ready) {
        out[size_t(p)].push_back({A::forward, 0, nf});
        f_end[size_t(p)][size_t(nf)] = t + 1, ++next_f[size_t(p)];
      } else if (w_ready) {
        out[size_t(p)].push_back({A::backward_weight, 0, nw});
        ++next_w[size_t(p)];
      } else {
        continue;
      }
      free_at[size_t(p)] = t + 1;
      ++done;
    }
    TRIDENT_CHECK(t < 100 * P * M + 100, "zero_bubble construction did not finish (P {} M {})", P, M);
  }
  return out;
}

// DeepSeek's DualPipeV (github.com/deepseek-ai/DualPipe, dualpipev.py),
// phase by phase: each local chunk (the V's arm 0 = global chunk p, arm 1 =
// 2P-1-p) takes its micro-batches in order; a split backward (zero bubble)
// queues its weight pass, which a later W takes in order.
std::vector<Action> dualpipev(int P, int M, int p) {
  std::vector<Action> out;
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};
  std::vector<std::pair<int, int>> weights;  // queued weight passes (chunk, micro)
  size_t next_w = 0;
  auto F = [&](int v) { out.push_back({A::forward, v, next_f[v]++}); };
  auto B = [&](int v, bool split = false) {
    const int m = next_b[v]++;
    out.push_back({split ? A::backward_input : A::backward, v, m});
    if (split) weights.push_back({v, m});
  };
  auto W = [&] {
    TRIDENT_CHECK(next_w < weights.size(), "dualpipev: a weight pass with none queued (P {} M {} rank {})", P, M, p);
    const auto [v, m] = weights[next_w++];
    out.push_back({A::backward_weight, v, m});
  };
  // a paired step: arm f's next forward and arm b's next (whole) backward
  auto FB = [&](int f, int b) { out.push_back({A::paired, f, next_f[f]++, b, next_b[b]++}); };
  const bool last = p == P - 1;
  for (int i = 0; i < (P - p - 1) * 2; ++i) F(0);             // 1: forwards of arm 0
  for (int i = 0; i < p + 1; ++i) F(0), F(1);                 // 2: both arms
  for (int i = 0; i < P - p - 1; ++i) B(1, true), W(), F(1);  // 3: zero bubble on arm 1
  for (int i = 0; i < M - 2 * P + p + 1; ++i) {               // 4: the main phase
    if (i == 0 && last)
      F(0), B(1);  // DualPipeV leaves this pair unpaired: the bubble is smaller
    else
      FB(0, 1);
    FB(1, 0);
  }
  for (int i = 0; i < P - p - 1; ++i) B(1), FB(1, 0);  // 5
  for (int i = 0; i < p + 1; ++i) {                    // 6: backwards, the later half split
    const int half = (p + 1) / 2;  // from here on split: arm 1's from this step on odd ranks, the next on even
    B(1, i > half || (i == half && p % 2 == 1));
    B(0, i >= half);
  }
  for (int i = 0; i < P - p - 1; ++i) W(), B(0, true);  // 7
  for (int i = 0; i < p + 1; ++i) W();                  // 8
  TRIDENT_CHECK(next_w == weights.size() && next_f[0] == M && next_f[1] == M && next_b[0] == M && next_b[1] == M,
                "dualpipev construction is incomplete (P {} M {} rank {})", P, M, p);
  return out;
}

std::vector<Action> compute_actions(ScheduleKind kind, int P, int V, int M, int p) {
  switch (kind) {
    case ScheduleKind::gpipe: {
      std::vector<Action> out;
      for (int m = 0; m < M; ++m) out.push_back({A::forward, 0, m});
      for (int m = 0; m < M; ++m) out.push_back({A::backward, 0, m});
      return out;
    }
    case ScheduleKind::one_f_one_b:
      return one_f_one_b(P, M, p);
    case ScheduleKind::interleaved_1f1b:
      return interleaved(P, V, M, p);
    case ScheduleKind::zero_bubble: {
      // cached: every rank of a run asks for its row of the same table
      static std::map<std::pair<int, int>, std::vector<std::vector<Action>>> cache;
      auto key = std::make_pair(P, M);
      if (!cache.count(key)) cache[key] = zero_bubble_all(P, M);
      return cache[key][size_t(p)];
    }
    case ScheduleKind::dualpipev:
      return dualpipev(P, M, p);
  }
  return {};
}

}  // namespace

std::vector<Action> make_schedule(ScheduleKind kind, int P, int V, int M, int p) {
  validate_schedule(kind, P, V, M);
  TRIDENT_CHECK(p >= 0 && p < P, "rank {} outside pipeline {}", p, P);
  const int last = P * V - 1;
  std::vector<Action> out;
  for (const Action& a : compute_actions(kind, P, V, M, p)) {
    const int c = global_chunk(kind, P, a.chunk, p);
    switch (a.type) {
      case A::forward:
        if (c > 0) out.push_back({A::recv_act, a.chunk, a.micro});
        out.push_back(a);
        if (c < last) out.push_back({A::send_act, a.chunk, a.micro});
        break;
      case A::backward:
      case A::backward_input:
        if (c < last) out.push_back({A::recv_grad, a.chunk, a.micro});
        out.push_back(a);
        if (c > 0) out.push_back({A::send_grad, a.chunk, a.micro});
        break;
      case A::paired: {  // both inputs before it, both outputs after it
        const int cb = global_chunk(kind, P, a.pair_chunk, p);
        if (c > 0) out.push_back({A::recv_act, a.chunk, a.micro});
        if (cb < last) out.push_back({A::recv_grad, a.pair_chunk, a.pair_micro});
        out.push_back(a);
        if (c < last) out.push_back({A::send_act, a.chunk, a.micro});
        if (cb > 0) out.push_back({A::send_grad, a.pair_chunk, a.pair_micro});
        break;
      }
      default:
        out.push_back(a);
    }
  }
  return out;
}

double Simulation::bubble_fraction() const {
  double s = 0;
  for (double b : bubble) s += b;
  return bubble.empty() ? 0 : s / double(bubble.size());
}

Simulation simulate(ScheduleKind kind, int P, int V, int M, const Costs& costs) {
  validate_schedule(kind, P, V, M);
  const int C = P * V;
  std::vector<std::vector<Action>> lists(static_cast<size_t>(P));
  for (int p = 0; p < P; ++p)
    for (const Action& a : make_schedule(kind, P, V, M, p))
      if (is_compute(a.type)) lists[size_t(p)].push_back(a);
  const double kNever = -1;
  // end times by global chunk and micro-batch (kNever: not run yet)
  std::vector<std::vector<double>> f_end(size_t(C), std::vector<double>(size_t(M), kNever)), b_end = f_end;
  Simulation sim;
  sim.busy.assign(size_t(P), 0), sim.bubble.assign(size_t(P), 0), sim.peak_in_flight.assign(size_t(P), 0);
  sim.spans.resize(static_cast<size_t>(P));
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0);
  std::vector<int> in_flight(size_t(P), 0);
  // when action a of rank p can start (its input's end time) and what it costs; ok false: not yet
  struct Readiness {
    bool ok = false;
    double at = 0, cost = 0;
    std::string error;  // the list itself is wrong: no waiting fixes it
  };
  auto readiness = [&](const Action& a, int p) {
    Readiness r;
    const int c = global_chunk(kind, P, a.chunk, p);
    const size_t m = size_t(a.micro);
    if (a.type == A::forward) {
      if (c > 0 && f_end[size_t(c - 1)][m] < 0) return r;
      r.at = c > 0 ? f_end[size_t(c - 1)][m] : 0, r.cost = costs.forward;
    } else if (a.type == A::backward || a.type == A::backward_input) {
      if (f_end[size_t(c)][m] < 0) {
        r.error = fmt::format("rank {}: backward of chunk {} micro-batch {} before its forward", p, a.chunk, a.micro);
        return r;
      }
      if (c < C - 1 && b_end[size_t(c + 1)][m] < 0) return r;
      r.at = c < C - 1 ? b_end[size_t(c + 1)][m] : f_end[size_t(c)][m];
      r.cost = a.type == A::backward ? costs.backward_input + costs.backward_weight : costs.backward_input;
    } else {  // backward_weight
      if (b_end[size_t(c)][m] < 0) {
        r.error = fmt::format("rank {}: weight gradient of chunk {} micro-batch {} before its input gradient", p,
                              a.chunk, a.micro);
        return r;
      }
      r.cost = costs.backward_weight;
    }
    r.ok = true;
    return r;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < P; ++p) {
      auto& list = lists[size_t(p)];
      while (next[size_t(p)] < list.size()) {
        // a paired step: its forward and backward as one unit, once both inputs are there
        const Action& a = list[next[size_t(p)]];
        const bool pair = a.type == A::paired;
        const Action sub[2] = {pair ? paired_forward(a) : a, pair ? paired_backward(a) : a};
        Readiness r = readiness(sub[0], p), rb;
        if (pair) rb = readiness(sub[1], p);
        if (!r.error.empty() || !rb.error.empty()) {
          sim.deadlock = true;
          sim.deadlock_reason = r.error.empty() ? rb.error : r.error;
          return sim;
        }
        if (!r.ok || (pair && !rb.ok)) break;
        const double start = std::max({clock[size_t(p)], r.at, pair ? rb.at : 0.0});
        const double whole = pair ? (costs.paired >= 0 ? costs.paired : r.cost + rb.cost) : r.cost;
        const double end = start + whole;
        double at = start;
        for (size_t k = 0; k < (pair ? 2u : 1u); ++k) {
          const Action& x = sub[k];
          const int c = global_chunk(kind, P, x.chunk, p);
          const size_t m = size_t(x.micro);
          const double part = pair ? whole * (k == 0 ? r.cost : rb.cost) / (r.cost + rb.cost) : whole;
          // a pair's outputs are there when the pair ends
          if (x.type == A::forward) f_end[size_t(c)][m] = end, in_flight[size_t(p)] += 1;
          if (x.type == A::backward || x.type == A::backward_input) b_end[size_t(c)][m] = end;
          if (x.type == A::backward || x.type == A::backward_weight) in_flight[size_t(p)] -= 1;
          sim.peak_in_flight[size_t(p)] = std::max(sim.peak_in_flight[size_t(p)], in_flight[size_t(p)]);
          sim.spans[size_t(p)].push_back({x, at, at + part});
          at += part;
        }
        sim.busy[size_t(p)] += whole;
        clock[size_t(p)] = end;
        next[size_t(p)] += 1;
        progress = true;
      }
    }
  }
  for (int p = 0; p < P; ++p)
    if (next[size_t(p)] < lists[size_t(p)].size()) {
      const Action& a = lists[size_t(p)][next[size_t(p)]];
      sim.deadlock = true;
      sim.deadlock_reason =
          fmt::format("rank {} waits forever at {} of chunk {} micro-batch {}", p, enum_name(a.type), a.chunk, a.micro);
      return sim;
    }
  for (int p = 0; p < P; ++p) sim.makespan = std::max(sim.makespan, clock[size_t(p)]);
  for (int p = 0; p < P; ++p) sim.bubble[size_t(p)] = 1 - sim.busy[size_t(p)] / sim.makespan;
  return sim;
}

std::string render_timeline(const Simulation& sim, int V, int width) {
  // one cell per time unit when it fits in `width`, else scaled down
  const double scale = std::min(1.0, double(width) / std::max(1.0, sim.makespan));
  const int cells = int(std::ceil(sim.makespan * scale));
  std::string out;
  for (size_t p = 0; p < sim.spans.size(); ++p) {
    std::vector<std::string> row(size_t(cells), " .");
    for (const Span& s : sim.spans[p]) {
      char kind = s.action.type == A::forward ? 'F' : s.action.type == A::backward_weight ? 'W' : 'B';
      if (V > 1 && s.action.chunk % 2 == 1) kind = char(kind - 'A' + 'a');  // odd chunks in lower case
      const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
      const std::string cell = std::string(1, kind) + digits[s.action.micro % 36];
      for (int c = int(std::floor(s.start * scale)); c < int(std::ceil(s.end * scale)) && c < cells; ++c)
        row[size_t(c)] = cell;
    }
    out += fmt::format("rank {:>2} |", p);
    for (const auto& c : row) out += c;
    out += fmt::format("| bubble {:.1f}% | peak in flight {}\n", 100 * sim.bubble[p], sim.peak_in_flight[p]);
  }
  return out;
}

double bubble_time_formula(ScheduleKind kind, int P, const Costs& c) {
  const double F = c.forward, W = c.backward_weight, B = c.backward_input + W;
  switch (kind) {
    case ScheduleKind::one_f_one_b:
      return (P - 1) * (F + B);
    case ScheduleKind::zero_bubble:
      return (P - 1) * (F + B - 2 * W);
    case ScheduleKind::dualpipev:
      return (P - 1) * ((c.paired >= 0 ? c.paired : F + B) + B - 3 * W);
    default:
      return -1;
  }
}

double bubble_formula(ScheduleKind kind, int P, int V, int M) {
  if (kind == ScheduleKind::interleaved_1f1b) return double(P - 1) / double(V * M + P - 1);
  return double(P - 1) / double(M + P - 1);
}

}  // namespace trident::parallel
