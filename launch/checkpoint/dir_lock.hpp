// One run per checkpoint directory: a run holds an exclusive lock (flock on
// CHECKPOINT_DIR/run.lock, which holds the holder's host, PID and start
// time) from before it resumes until it ends. A second run on the directory
// is refused naming the holder; a lock file left by a run that is gone (the
// kernel drops a dead process's lock) is taken over, and the log says whose
// it was. Creating the lock also checks that the directory can be written,
// before any step runs.
#pragma once
#include <string>

namespace trident::launch {

class CheckpointDirLock {
 public:
  // InputError when the directory cannot be created or written, or another
  // live run holds it.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace trident::launch
