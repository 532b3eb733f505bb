// The flight recorder (docs/slurm.md#when-something-goes-wrong): every rank
// keeps its last N communication operations (operation, group, the group's
// sequence number of the operation, bytes, peer, start and end). When an
// operation times out (parallel.timeout_s), the rank writes its records to
// DIR/rank_R.json, waits a little for the other members' records, and says
// which member is behind and where:
//   rank 5 never entered all_reduce #1841 on group data(1) (ranks 4, 6, 7
//   did); its last operation: all_gather #1840 on group data(1), completed
// A rank that writes no records in that time is hung outside communication
// (or dead), and the diagnosis says so. Collectives are matched by their
// sequence number in the group (every member issues a group's collectives in
// the same order); point-to-point transfers name the peer's last operation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident::parallel::flight {

struct Record {
  std::string op;     // all_reduce, send, ...
  std::string group;  // data(1): the group's kind and index
  int64_t seq = 0;    // this rank's count of operations on the group, from 1
  int64_t bytes = 0;
  int peer = -1;              // point-to-point: the peer's world rank
  double start = 0, end = 0;  // seconds since the epoch; end 0: not completed
};

// Where timeouts write records, this rank's world rank and the ring's size.
void configure(const std::string& dir, int world_rank, int capacity = 1024);
const std::string& directory();

// Records the start of an operation; returns its handle for finished().
int64_t started(const char* op, const std::string& group, int64_t seq, int64_t bytes, int peer);
void finished(int64_t handle);

// This rank's records, oldest first.
std::vector<Record> records();

// On a timeout of the operation `handle` in a group of `members` (world
// ranks): writes this rank's records, waits up to `grace_s` for the other
// members' (returning as soon as all are there), and returns the diagnosis
// ("" when there is nothing to say).
std::string diagnose_timeout(int64_t handle, const std::vector<int>& members, double grace_s);

}  // namespace trident::parallel::flight
