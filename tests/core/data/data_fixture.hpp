// The data tests' fixture: a fresh directory per test, a small dataset,
// the error an open raises, byte patches (test_data.cpp, test_prepare.cpp).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/error.hpp"

namespace trident {

namespace fs = std::filesystem;

inline std::string slurp(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Data : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident_data_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }

  std::string write_sample(data::TokenDType dt = data::TokenDType::u16) {
    std::string prefix = path("ds");
    data::IndexedDatasetWriter w(prefix, dt);
    std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7}, c = {250, 9, 10};
    w.add_sequence(a.data(), 5);
    w.end_document();
    w.add_sequence(b.data(), 2);
    w.add_sequence(c.data(), 3);
    w.end_document();
    w.finish();
    return prefix;
  }
  std::string error_opening(const std::string& prefix) {
    try {
      data::IndexedDataset d(prefix);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }
  void patch(const std::string& file, size_t offset, const std::vector<uint8_t>& bytes) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(offset));
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  fs::path dir_;
};

}  // namespace trident
