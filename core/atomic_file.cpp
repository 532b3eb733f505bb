// Whole-or-nothing file writes (see atomic_file.hpp).
#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace trident {

std::string unwritable_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return "no such directory";
  if (!std::filesystem::is_directory(dir, ec)) return "not a directory";
  if (access(dir.c_str(), W_OK) != 0) return "not writable";
  return "";
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot create ({})", tmp_, std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void AtomicFile::fail(const std::string& what) {
  const std::string why = std::strerror(errno);
  ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
  throw Error(fmt::format("{}: {} failed ({}); {} left as it was", tmp_, what, why, path_));
}

void AtomicFile::write(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::write(fd_, p, size_t(bytes));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) fail("write");
    p += put, bytes -= put;
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync");
  ::close(fd_);
  fd_ = -1;
  std::filesystem::rename(tmp_, path_);
  const std::filesystem::path target(path_);
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".");  // the rename itself is durable
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile f(path);
  f.write(contents.data(), int64_t(contents.size()));
  f.commit();
}

}  // namespace trident
