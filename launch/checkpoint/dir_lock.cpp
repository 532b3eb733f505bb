// The checkpoint directory's run lock (see dir_lock.hpp).
#include "launch/checkpoint/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::launch {
namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : path_((fs::path(dir) / "run.lock").string()) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail_input("checkpoint.dir {}: expected a directory, found a file", dir);
  fs::create_directories(dir, ec);
  if (ec) fail_input("checkpoint.dir {}: cannot create it: {}", dir, ec.message());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_input("checkpoint.dir {}: cannot write in it ({}): {}", dir, path_, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_all(fd_);
    ::close(fd_), fd_ = -1;
    if (err == EWOULDBLOCK)
      fail_input(
          "checkpoint.dir {}: in use by another run ({}); two runs on one checkpoint directory would overwrite each "
          "other's checkpoints: wait for it, stop it, or set another checkpoint.dir",
          dir, holder.empty() ? "holder unknown" : holder);
    fail_input("checkpoint.dir {}: cannot lock {}: {}", dir, path_, std::strerror(err));
  }
  const std::string previous = read_all(fd_);
  if (!previous.empty()) log::warn("checkpoint.dir {}: taking over the lock of a run that is gone ({})", dir, previous);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  const std::string me = fmt::format("host {}, PID {}, since {}\n", host_name(), ::getpid(), when);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()) || ::fsync(fd_) != 0) {
    const int err = errno;
    ::close(fd_), fd_ = -1;
    fail_input("checkpoint.dir {}: cannot write {}: {}", dir, path_, std::strerror(err));
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ < 0) return;
  // emptied, not removed: a run that opened the file meanwhile locks the same one
  if (::ftruncate(fd_, 0) != 0) log::warn("{}: could not clear it: {}", path_, std::strerror(errno));
  ::close(fd_);
}

}  // namespace trident::launch
