// Collectives over real MPI processes (run under mpirun by ctest with 2, 4
// and 8 ranks): every operation, sizes not divisible by the group size,
// several groups in flight at once, async overlap, and the groups of a
// 2x2x2 mesh. Each rank checks its own results; mpirun fails if any rank does.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>

#include "core/error.hpp"

#include "core/dtype.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident::parallel {

MpiCommunicator* g_world = nullptr;

Tensor filled(int64_t n, DType dt, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dt, MemCategory::comm);
  for (int64_t i = 0; i < n; ++i) {
    double v = f(i);
    switch (dt) {
      case DType::f32:
        t.data<float>()[i] = float(v);
        break;
      case DType::f64:
        t.data<double>()[i] = v;
        break;
      case DType::i32:
        t.data<int32_t>()[i] = int32_t(v);
        break;
      case DType::bf16:
        static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(float(v));
        break;
      default:
        break;
    }
  }
  return t;
}

double at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[i];
    case DType::f64:
      return t.data<double>()[i];
    case DType::i32:
      return t.data<int32_t>()[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<uint16_t*>(t.raw())[i]);
    default:
      return 0;
  }
}

TEST(Collectives, AllReduceEveryDtypeAndOp) {
  auto& w = *g_world;
  const int n = w.size(), r = w.rank();
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::bf16}) {
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000003)}) {
      Tensor t = filled(count, dt, [&](int64_t i) { return double((i % 5) + r); });
      w.all_reduce(t)->wait();
      for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 97))
        ASSERT_EQ(at(t, i), double(n * (i % 5) + n * (n - 1) / 2))
            << dtype_name(dt) << " count " << count << " i " << i;
    }
    if (dt == DType::bf16) continue;
    Tensor m = filled(5, dt, [&](int64_t i) { return double(r * 10 + i); });
    w.all_reduce(m, {ReduceOp::max})->wait();
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(at(m, i), double((n - 1) * 10 + i));
  }
}

TEST(Collectives, ReduceScatterUnevenSizes) {
  auto& w = *g_world;
  const int n = w.size(), r = w.rank();
  for (int64_t total : {int64_t(n), int64_t(10 * n + 3), int64_t(1)}) {
    auto counts = split_counts(total, n, {});
    int64_t off = std::accumulate(counts.begin(), counts.begin() + r, int64_t(0));
    Tensor in = filled(total, DType::f32, [&](int64_t i) { return double(i + 100 * r); });
    Tensor out = Tensor::empty({counts[size_t(r)]}, DType::f32, MemCategory::comm);
    w.reduce_scatter(out, in)->wait();
    for (int64_t i = 0; i < counts[size_t(r)]; ++i)
      ASSERT_EQ(at(out, i), double(n * (off + i) + 100 * n * (n - 1) / 2)) << "total " << total << " i " << i;
  }
  // explicit counts, one rank getting nothing
  std::vector<int64_t> counts(size_t(n), 2);
  counts[0] = 0;
  counts[size_t(n - 1)] = 5;
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  Tensor in = filled(total, DType::f64, [&](int64_t i) { return double(i); });
  Tensor out = Tensor::empty({counts[size_t(r)]}, DType::f64, MemCategory::comm);
  w.reduce_scatter(out, in, {ReduceOp::sum, counts})->wait();
  int64_t off = std::accumulate(counts.begin(), counts.begin() + r, int64_t(0));
  for (int64_t i = 0; i < counts[size_t(r)]; ++i) EXPECT_EQ(at(out, i), double(n * (off + i)));
}

TEST(Collectives, AllGatherUnevenSizes) {
  auto& w = *g_world;
  const int n = w.size(), r = w.rank();
  const int64_t total = 10 * n + 3;
  auto counts = split_counts(total, n, {});
  Tensor buf = filled(total, DType::f32, [](int64_t) { return -1.0; });
  int64_t off = std::accumulate(counts.begin(), counts.begin() + r, int64_t(0));
  for (int64_t i = 0; i < counts[size_t(r)]; ++i) buf.data<float>()[off + i] = float(off + i);
  w.all_gather(buf)->wait();
  for (int64_t i = 0; i < total; ++i) ASSERT_EQ(at(buf, i), double(i));
}

// Variable all-to-all: rank q sends (q + r) % 3 elements to rank r (some
// none), values naming source, destination and index; every rank receives
// its chunks in source order. Counts exchanged first with a one-element
// all_to_all, as the MoE dispatch does.
TEST(Collectives, AllToAllVariableCounts) {
  auto& w = *g_world;
  const int n = w.size(), r = w.rank();
  auto sent = [](int q, int to) { return int64_t((q + to) % 3); };
  for (DType dt : {DType::f32, DType::i32, DType::bf16}) {
    std::vector<int64_t> send(static_cast<size_t>(n)), ones(static_cast<size_t>(n), 1);
    for (int to = 0; to < n; ++to) send[size_t(to)] = sent(r, to);
    Tensor sc = filled(n, DType::i32, [&](int64_t to) { return double(send[size_t(to)]); });
    Tensor rc = filled(n, DType::i32, [](int64_t) { return -1.0; });
    w.all_to_all(rc, sc, {ones, ones})->wait();
    std::vector<int64_t> recv(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      recv[size_t(q)] = int64_t(at(rc, q));
      ASSERT_EQ(recv[size_t(q)], sent(q, r));
    }
    const int64_t ns = std::accumulate(send.begin(), send.end(), int64_t(0)),
                  nr = std::accumulate(recv.begin(), recv.end(), int64_t(0));
    std::vector<double> vals;
    for (int to = 0; to < n; ++to)
      for (int64_t i = 0; i < send[size_t(to)]; ++i)
        vals.push_back(double(r * 16 + to + (dt == DType::bf16 ? 0 : 100 * i)));
    Tensor in = filled(ns, dt, [&](int64_t i) { return vals[size_t(i)]; });
    Tensor out = filled(nr, dt, [](int64_t) { return -1.0; });
    w.all_to_all(out, in, {send, recv})->wait();
    int64_t k = 0;
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < recv[size_t(q)]; ++i, ++k)
        ASSERT_EQ(at(out, k), double(q * 16 + r + (dt == DType::bf16 ? 0 : 100 * i)))
            << dtype_name(dt) << " from " << q << " element " << i;
  }
  // counts that do not match the buffers are refused before anything moves
  Tensor a = Tensor::empty({3}, DType::f32, MemCategory::comm), b = Tensor::empty({3}, DType::f32, MemCategory::comm);
  EXPECT_THROW(w.all_to_all(a, b, {std::vector<int64_t>(size_t(n), 1), std::vector<int64_t>(size_t(n), 1)}), Error);
}

TEST(Collectives, BroadcastSendRecvBarrier) {
  auto& w = *g_world;
  const int n = w.size(), r = w.rank();
  const int root = n - 1;
  Tensor b = filled(33, DType::i32, [&](int64_t i) { return r == root ? double(i * 3) : 0.0; });
  w.broadcast(b, {root})->wait();
  for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(at(b, i), double(i * 3));
  // ring: send to the right, receive from the left, posted together
  Tensor out = filled(17, DType::f32, [&](int64_t i) { return double(r * 1000 + i); });
  Tensor in = Tensor::empty({17}, DType::f32, MemCategory::comm);
  auto rw = w.recv(in, {(r + n - 1) % n, 5});
  auto sw = w.send(out, {(r + 1) % n, 5});
  rw->wait();
  sw->wait();
  for (int64_t i = 0; i < 17; ++i) EXPECT_EQ(at(in, i), double(((r + n - 1) % n) * 1000 + i));
  w.barrier()->wait();
}

TEST(Collectives, SeveralGroupsInFlightAndOverlap) {
  auto& w = *g_world;
  const int r = w.rank();
  auto half = w.split(r % 2, r, "parity");
  Tensor a = filled(100000, DType::f32, [&](int64_t) { return 1.0; });
  Tensor b = filled(100000, DType::f32, [&](int64_t) { return double(r); });
  auto wa = w.all_reduce(a);
  auto wb = half->all_reduce(b);
  // compute while both are in flight, polling for progress
  double acc = 0;
  int polls = 0;
  while (!(wa->is_completed() && wb->is_completed())) {
    for (int i = 0; i < 10000; ++i) acc += std::sqrt(double(i));
    ++polls;
  }
  wa->wait();
  wb->wait();
  EXPECT_GT(acc, 0);
  EXPECT_EQ(at(a, 99999), double(w.size()));
  double expect = 0;
  for (int q = 0; q < w.size(); ++q)
    if (q % 2 == r % 2) expect += q;
  EXPECT_EQ(at(b, 12345), expect);
}

TEST(Collectives, GroupsOfA2x2x2Mesh) {
  auto& w = *g_world;
  if (w.size() != 8) GTEST_SKIP() << "needs 8 ranks (ctest runs it with mpirun -np 8)";
  Topology topo(2, 2, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline});
  ProcessGroups groups(topo, w);
  for (GroupKind k : kAllGroupKinds) {
    auto& g = groups.get(k);
    auto members = topo.members(k, w.rank());
    ASSERT_EQ(g.size(), int(members.size())) << enum_name(k);
    Tensor t = filled(3, DType::i32, [&](int64_t) { return double(w.rank()); });
    g.all_reduce(t)->wait();
    EXPECT_EQ(at(t, 2), double(std::accumulate(members.begin(), members.end(), 0))) << enum_name(k);
  }
}

// A hang is never silent: a rank waiting past parallel.timeout_s on a
// collective or a transfer that a peer never joins gets an Error naming the
// operation, the group and the peer. The late peer joins afterwards, so the
// abandoned operation still completes and the ranks end cleanly.
TEST(Collectives, TimeoutNamesOperationGroupAndPeer) {
  auto& w = *g_world;
  const double saved = collective_timeout();
  set_collective_timeout(0.5);
  Tensor t = filled(10, DType::f32, [](int64_t) { return 1.0; });
  if (w.rank() == 0) {
    try {
      w.all_reduce(t)->wait();
      ADD_FAILURE() << "all_reduce did not time out";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("timed out after"), std::string::npos) << m;
      EXPECT_NE(m.find("in all_reduce of 10 elements on group 'world' (this rank 0 of"), std::string::npos) << m;
    }
    try {
      w.recv(t, {.peer = 1, .tag = 99})->wait();
      ADD_FAILURE() << "recv did not time out";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("in recv of 10 elements from peer 1 (world rank 1), tag 99, on group 'world'"),
                std::string::npos)
          << m;
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // "hung" past rank 0's timeout
    set_collective_timeout(saved);
    w.all_reduce(t)->wait();
    if (w.rank() == 1) w.send(t, {.peer = 0, .tag = 99})->wait();
  }
  set_collective_timeout(saved);
  w.barrier()->wait();
}

}  // namespace trident::parallel

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv,
                                      [](trident::parallel::MpiCommunicator& w) { trident::parallel::g_world = &w; });
}
