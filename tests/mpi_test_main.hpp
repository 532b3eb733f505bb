// main() of the multi-process tests: MPI up, GoogleTest on every rank (only
// rank 0 prints), and the run fails if any rank's tests failed.
#pragma once
#include <gtest/gtest.h>

#include <functional>

#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::test {

// `with_world` runs before the tests with the world communicator (set globals).
inline int run_mpi_tests(int argc, char** argv,
                         const std::function<void(parallel::MpiCommunicator&)>& with_world = {}) {
  parallel::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  auto world = parallel::MpiCommunicator::world();
  if (with_world) with_world(*world);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int any = rc;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  world.reset();
  return any;
}

}  // namespace trident::test
