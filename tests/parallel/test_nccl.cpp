// NCCL communicator on GPU buffers, under mpirun. Runs where each rank has
// its own GPU; elsewhere every test skips with the reason.
#include <gtest/gtest.h>

#include "core/device_memory.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident::parallel {

MpiCommunicator* g_world = nullptr;

std::string skip_reason() {
  if (!nccl_built()) return "this build has no NCCL backend (no CUDA toolkit at configure time)";
  int n = device_count();
  if (n == 0) return "no CUDA device on this machine: NCCL tests run where GPUs exist";
  if (n < g_world->size()) return "fewer GPUs than ranks (NCCL needs one GPU per rank)";
  return "";
}

Tensor to_device(const std::vector<float>& h, int dev) {
  Tensor t = Tensor::empty({int64_t(h.size())}, DType::f32, MemCategory::comm, Device{DeviceType::cuda, dev});
  copy_to_device(t.raw(), h.data(), h.size() * 4, dev);
  return t;
}
std::vector<float> to_host(const Tensor& t, int dev) {
  std::vector<float> h(size_t(t.numel()));
  copy_to_host(h.data(), t.raw(), h.size() * 4, dev);
  return h;
}

TEST(Nccl, AllReduceReduceScatterAllGather) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const int n = g_world->size(), r = g_world->rank(), dev = r % device_count();
  NcclCommunicator nc(*g_world, dev);
  std::vector<float> h(1000003);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float((i % 5) + r);
  Tensor t = to_device(h, dev);
  nc.all_reduce(t)->wait();
  auto got = to_host(t, dev);
  for (size_t i = 0; i < got.size(); i += 997) ASSERT_EQ(got[i], float(n * (i % 5) + n * (n - 1) / 2));
  // uneven reduce-scatter and all-gather
  const int64_t total = 10 * n + 3;
  auto counts = split_counts(total, n, {});
  std::vector<float> in(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) in[size_t(i)] = float(i + r);
  Tensor din = to_device(in, dev);
  Tensor dout = Tensor::empty({counts[size_t(r)]}, DType::f32, MemCategory::comm, Device{DeviceType::cuda, dev});
  nc.reduce_scatter(dout, din)->wait();
  int64_t off = 0;
  for (int q = 0; q < r; ++q) off += counts[size_t(q)];
  auto rs = to_host(dout, dev);
  for (int64_t i = 0; i < counts[size_t(r)]; ++i) ASSERT_EQ(rs[size_t(i)], float(n * (off + i) + n * (n - 1) / 2));
  std::vector<float> g(size_t(total), -1.f);
  for (int64_t i = 0; i < counts[size_t(r)]; ++i) g[size_t(off + i)] = float(off + i);
  Tensor dg = to_device(g, dev);
  nc.all_gather(dg, {counts})->wait();
  auto ag = to_host(dg, dev);
  for (int64_t i = 0; i < total; ++i) ASSERT_EQ(ag[size_t(i)], float(i));
}

}  // namespace trident::parallel

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv,
                                      [](trident::parallel::MpiCommunicator& w) { trident::parallel::g_world = &w; });
}
