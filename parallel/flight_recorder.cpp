// The flight recorder (see flight_recorder.hpp).
#include "parallel/flight_recorder.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/atomic_file.hpp"

namespace trident::parallel::flight {
namespace {

using Json = nlohmann::json;

struct Ring {
  std::mutex mutex;
  std::vector<Record> slots = std::vector<Record>(1024);
  int64_t next = 0;  // handles are 0, 1, 2, ...; slot = handle % size
  std::string dir;
  int rank = 0;
};
Ring& ring() {
  static Ring r;
  return r;
}

double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string file_of(const std::string& dir, int rank) { return fmt::format("{}/rank_{}.json", dir, rank); }

// A rank's dump: its records and the members of the group it timed out in.
struct Dump {
  std::vector<Record> records;
  std::vector<int> waiting_for;
};

Json to_json(const std::vector<Record>& rs, int rank, const std::vector<int>& waiting_for) {
  Json ops = Json::array();
  for (const Record& r : rs)
    ops.push_back({{"op", r.op},
                   {"group", r.group},
                   {"seq", r.seq},
                   {"bytes", r.bytes},
                   {"peer", r.peer},
                   {"start", r.start},
                   {"end", r.end}});
  return {{"rank", rank}, {"written", now()}, {"waiting_for", waiting_for}, {"operations", ops}};
}

std::optional<Dump> read_dump(const std::string& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  try {
    const Json j = Json::parse(in);
    Dump out;
    for (const Json& o : j.at("operations"))
      out.records.push_back(
          {o.at("op"), o.at("group"), o.at("seq"), o.at("bytes"), o.at("peer"), o.at("start"), o.at("end")});
    out.waiting_for = j.value("waiting_for", std::vector<int>{});
    return out;
  } catch (const Json::exception&) {
    return std::nullopt;  // being written by another rank's atomic rename: not yet there
  }
}

std::string describe(const Record& r) {
  const std::string peer = r.peer >= 0 ? fmt::format(" (peer world rank {})", r.peer) : "";
  return fmt::format("{} #{} on group {}{}, {}", r.op, r.seq, r.group, peer,
                     r.end > 0 ? "completed" : fmt::format("waiting for {:.0f} s", now() - r.start));
}

}  // namespace

void configure(const std::string& dir, int world_rank, int capacity) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.dir = dir, r.rank = world_rank;
  r.slots.assign(size_t(std::max(16, capacity)), Record{});
  r.next = 0;
}

const std::string& directory() { return ring().dir; }

int64_t started(const char* op, const std::string& group, int64_t seq, int64_t bytes, int peer) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t h = r.next++;
  r.slots[size_t(h % int64_t(r.slots.size()))] = Record{op, group, seq, bytes, peer, now(), 0};
  return h;
}

void finished(int64_t handle) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (handle < r.next - int64_t(r.slots.size())) return;  // overwritten since
  r.slots[size_t(handle % int64_t(r.slots.size()))].end = now();
}

std::vector<Record> records() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<Record> out;
  const int64_t n = int64_t(r.slots.size());
  for (int64_t h = std::max<int64_t>(0, r.next - n); h < r.next; ++h) out.push_back(r.slots[size_t(h % n)]);
  return out;
}

std::string diagnose_timeout(int64_t handle, const std::vector<int>& members, double grace_s) {
  Ring& ring_ = ring();
  const std::vector<Record> mine = records();
  Record stuck;
  {
    std::lock_guard<std::mutex> lock(ring_.mutex);
    if (handle < ring_.next - int64_t(ring_.slots.size())) return "";
    stuck = ring_.slots[size_t(handle % int64_t(ring_.slots.size()))];
  }
  if (ring_.dir.empty()) return "";
  const bool collective = stuck.peer < 0;
  std::error_code ec;
  std::filesystem::create_directories(ring_.dir, ec);
  try {
    const std::vector<int> waiting_for = collective ? members : std::vector<int>{stuck.peer};
    write_file_atomic(file_of(ring_.dir, ring_.rank), to_json(mine, ring_.rank, waiting_for).dump(1) + "\n");
  } catch (const std::exception& e) {
    return fmt::format("flight recorder: could not write {} ({})", file_of(ring_.dir, ring_.rank), e.what());
  }
  // the other ranks' dumps, as they time out too (a rank hung outside
  // communication never writes one): waited for until all are there or the
  // grace period ends
  std::map<int, std::optional<Dump>> dumps;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  auto gather = [&](const std::vector<int>& ranks) {
    for (;;) {
      bool all = true;
      for (int m : ranks)
        if (m != ring_.rank && !dumps[m]) {
          dumps[m] = read_dump(file_of(ring_.dir, m));
          all = all && dumps[m].has_value();
        }
      if (all || std::chrono::steady_clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  const std::vector<int> involved = collective ? members : std::vector<int>{stuck.peer};
  gather(involved);
  std::vector<std::string> findings;
  std::vector<int> entered;
  std::vector<std::pair<int, std::vector<int>>> behind;  // a rank behind, and whom it waits for
  auto silent = [&](int m) {
    return fmt::format(
        "rank {} wrote no flight record within {:.0f} s: it is hung outside communication (computing, or stalled) "
        "or dead",
        m, grace_s);
  };
  for (int m : involved) {
    if (m == ring_.rank) continue;
    if (!dumps[m]) {
      findings.push_back(silent(m));
      continue;
    }
    const std::vector<Record>& rs = dumps[m]->records;
    const bool in_it = collective && std::any_of(rs.begin(), rs.end(), [&](const Record& r) {
                         return r.group == stuck.group && r.seq == stuck.seq;
                       });
    if (in_it) {
      entered.push_back(m);
      continue;
    }
    const std::string last = rs.empty() ? "none" : describe(rs.back());
    findings.push_back(collective ? fmt::format("rank {} never entered {} #{} on group {}; its last operation: {}", m,
                                                stuck.op, stuck.seq, stuck.group, last)
                                  : fmt::format("peer rank {}'s last operation: {}", m, last));
    behind.push_back({m, dumps[m]->waiting_for});
  }
  // one step further: whom the ranks that are behind wait for
  for (const auto& [m, waits] : behind) {
    gather(waits);
    for (int w : waits)
      if (w != ring_.rank && w != m && !dumps[w] && std::find(involved.begin(), involved.end(), w) == involved.end())
        findings.push_back(silent(w) + fmt::format(" (rank {} waits for it)", m));
  }
  std::string out =
      fmt::format("flight recorder ({}/rank_*.json): this rank {} waits in {}", ring_.dir, ring_.rank, describe(stuck));
  if (!entered.empty()) out += fmt::format("; ranks {} entered it too", fmt::join(entered, ", "));
  for (const auto& f : findings) out += "; " + f;
  return out;
}

}  // namespace trident::parallel::flight
