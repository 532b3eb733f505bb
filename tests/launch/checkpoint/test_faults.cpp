// What gets saved and claimed when something fails: faults injected with
// TRIDENT_FAULT (core/fault.hpp) at a chosen step, rank and phase; saves that
// fail at the end of a run or at a stop signal; `--resume` without `latest`;
// one run per checkpoint directory; checked checkpoint indexes. Every test
// waits on events (records in the metrics file, process exit), never on
// fixed delays.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/checkpoint/dir_lock.hpp"
#include "launch/checkpoint/index.hpp"
#include "parallel/flight_recorder.hpp"
#include "tests/test_util.hpp"

namespace trident {
namespace fs = std::filesystem;

namespace {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

using test::Scratch;

// `trident train` on the demo recipe, with TRIDENT_FAULT set (or not).
test::CliRun train(const std::string& fault, const std::string& sets, const std::string& launcher = "") {
  return test::run_cli(
      fmt::format("TRIDENT_FAULT='{}' OMPI_MCA_mpi_yield_when_idle=1 {} {}", fault, launcher, TRIDENT_BINARY),
      fmt::format("train {} --set eval.batches=0 --set log.metrics= {}", src("configs/demo.yaml"), sets));
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string latest(const std::string& ck) {
  std::ifstream in(ck + "/latest");
  std::string l;
  in >> l;
  return l;
}

bool contains(const std::string& out, const std::string& what) { return out.find(what) != std::string::npos; }

}  // namespace

// The last step's save fails: the run fails (exit 1) naming the previous
// checkpoint, which stays `latest`; no temporary is left.
TEST(Faults, FailedLastSaveIsAnError) {
  Scratch s("lastsave");
  const auto r = train("fail_write,step=4", fmt::format("--set train.steps=4 --set checkpoint.every=2 "
                                                        "--set checkpoint.dir={}",
                                                        s / "ck"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "the checkpoint after step 4 (the last step's save) failed: the run ends without it; "
                       "--resume continues from the previous checkpoint (step_00000002)"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "done:")) << r.out;
  EXPECT_EQ(names_in(s / "ck"), (std::vector<std::string>{"latest", "run.lock", "step_00000002"}));
  EXPECT_EQ(latest(s / "ck"), "step_00000002");
}

// A stop signal whose save fails (every save fails here): exit 1, never the
// "saved; resume" claim, so a job script does not requeue it as saved.
TEST(Faults, StopSignalWithAFailedSaveExitsNonZero) {
  Scratch s("stopsave");
  const std::string metrics = s / "metrics.jsonl";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("TRIDENT_FAULT", "fail_write", 1);
    const std::string cmd = fmt::format(
        "exec {} train {} --set train.steps=100000 --set eval.batches=0 --set log.metrics={} --set "
        "checkpoint.dir={} > {} 2>&1",
        TRIDENT_BINARY, src("configs/demo.yaml"), metrics, s / "ck", s / "out.txt");
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  auto records = [&] {
    std::ifstream f(metrics);
    int n = 0;
    for (std::string l; std::getline(f, l);) n += contains(l, "\"type\":\"train\"");
    return n;
  };
  while (records() < 2 && waitpid(pid, nullptr, WNOHANG) == 0) usleep(20000);  // the run is training
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream f(s / "out.txt");
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_TRUE(contains(out, "(the stop signal's save) failed: the run ends without it")) << out;
  EXPECT_FALSE(contains(out, "saved; resume with --resume")) << out;
  EXPECT_FALSE(fs::exists(s / "ck/latest"));
}

// Without `latest`, --resume takes the newest step directory whose files
// check out (a damaged newer one is skipped and named); with none complete it
// refuses instead of starting over them; a fresh run (no --resume) on a
// directory holding checkpoints is refused.
TEST(Faults, ResumeWithoutLatestTakesTheNewestCompleteStep) {
  Scratch s("nolatest");
  const std::string ck = s / "ck";
  const std::string sets = fmt::format("--set checkpoint.dir={} --set checkpoint.every=1 --set checkpoint.keep=3", ck);
  ASSERT_EQ(train("", "--set train.steps=3 " + sets).code, 0);
  fs::remove(ck + "/latest");
  fs::resize_file(ck + "/step_00000003/dp0_pp0_tp0.safetensors", 100);  // damaged
  auto r = train("", "--set train.steps=4 --resume " + sets);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "step_00000003: skipped, not a complete checkpoint")) << r.out;
  EXPECT_TRUE(contains(r.out, "no `latest`; using step_00000002, the newest complete checkpoint")) << r.out;
  EXPECT_TRUE(contains(r.out, "after step 2")) << r.out;
  EXPECT_EQ(latest(ck), "step_00000004");

  r = train("", "--set train.steps=5 " + sets);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, fmt::format("checkpoint.dir {} already holds checkpoints (`latest` -> step_00000004): "
                                          "continue that run with --resume",
                                          ck)))
      << r.out;

  fs::remove(ck + "/latest");
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().filename().string().rfind("step_", 0) == 0) fs::remove(e.path() / "dp0_pp0_tp0.safetensors");
  const auto before = names_in(ck);
  r = train("", "--set train.steps=5 --resume " + sets);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no `latest`, and none of its 3 step directories is a complete checkpoint")) << r.out;
  EXPECT_EQ(names_in(ck), before) << "nothing was removed or written";
}

// One run per checkpoint directory: a held lock refuses a second run naming
// the holder; a lock left by a process that is gone is taken over.
TEST(Faults, CheckpointDirectoryLock) {
  Scratch s("lock");
  const std::string ck = s / "ck";
  {
    launch::CheckpointDirLock mine(ck);
    const auto r = train("", fmt::format("--set train.steps=2 --set checkpoint.dir={}", ck));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("checkpoint.dir {}: in use by another run (host ", ck))) << r.out;
    EXPECT_TRUE(contains(r.out, fmt::format("PID {}, since", ::getpid()))) << r.out;
    EXPECT_THROW(launch::CheckpointDirLock again(ck), InputError);  // in one process too
    EXPECT_FALSE(fs::exists(ck + "/latest"));
  }
  std::ofstream(ck + "/run.lock") << "host elsewhere, PID 99999999, since yesterday\n";  // nobody holds it
  const auto r = train("", fmt::format("--set train.steps=2 --set checkpoint.dir={}", ck));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "taking over the lock of a run that is gone (host elsewhere, PID 99999999")) << r.out;
  // a checkpoint.dir that is a file is refused before training
  std::ofstream(s / "file") << "x";
  const auto f = train("", fmt::format("--set train.steps=2 --set checkpoint.dir={}", s / "file"));
  EXPECT_EQ(f.code, 2) << f.out;
  EXPECT_TRUE(contains(f.out, "expected a directory, found a file")) << f.out;
  EXPECT_FALSE(contains(f.out, "step      1/")) << f.out;
}

// `latest` names a step directory inside its checkpoint directory; the index
// is checksummed; a missing key is named.
TEST(Faults, LatestAndIndexAreChecked) {
  Scratch s("index");
  const std::string ck = s / "ck";
  ASSERT_EQ(train("", fmt::format("--set train.steps=2 --set checkpoint.dir={}", ck)).code, 0);
  const std::string index = ck + "/step_00000002/index.json";
  std::string text;
  {
    std::ifstream in(index);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_NO_THROW(launch::checkpoint::read_index(index));
  std::string edited = text;
  const size_t at = edited.find("\"offset\":0");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 10, "\"offset\":8");  // a swapped offset: valid JSON, wrong data
  std::ofstream(index) << edited;
  try {
    launch::checkpoint::read_index(index);
    ADD_FAILURE() << "an edited index was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "key 'index_crc32c': the index's checksum is")) << e.what();
  }
  std::ofstream(index) << text;
  std::ofstream(ck + "/latest") << "../../etc\n";
  try {
    launch::resolve_checkpoint(ck);
    ADD_FAILURE() << "latest outside the directory was followed";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "expected the name of a step directory inside")) << e.what();
  }
  // an index without its checksum (as before checksums) with a tokenizer kind this build does not know
  const size_t sum = text.rfind(",\"index_crc32c\"");
  std::ofstream(index) << text.substr(0, sum)
                       << R"(,"tokenizer":{"kind":"wordpiece","file":"t.json","crc32c":"00000000","vocab":32,"eod":0}})"
                       << "\n";
  try {
    launch::checkpoint::read_index(index);
    ADD_FAILURE() << "an unknown tokenizer kind was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              index + ": key 'tokenizer.kind': expected " + enum_choices<TokenizerKind>() + ", found 'wordpiece'");
  }
  // ... and one missing `files`: named
  std::string old = text.substr(0, sum) + "}\n";
  const size_t files = old.find(",\"files\":");
  const size_t tensors = old.find(",\"tensors\":");
  ASSERT_TRUE(files != std::string::npos && tensors > files);
  std::ofstream(index) << old.erase(files, tensors - files);
  try {
    launch::checkpoint::read_index(index);
    ADD_FAILURE() << "an index without files was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), index + ": key 'files': missing");
  }
  // experts split over ranks (mesh.expert > 1): each file names its expert rank and its expert shard
  std::string split = text.substr(0, sum) + "}\n";
  const size_t mesh = split.find("\"expert\":1");
  ASSERT_NE(mesh, std::string::npos) << split.substr(0, 400);
  split.replace(mesh, 10, "\"expert\":2");
  std::ofstream(index) << split;
  try {
    launch::checkpoint::read_index(index);
    ADD_FAILURE() << "a file without its expert rank was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "key 'ep' in 'files[0]': missing")) << e.what();
  }
  const size_t first = split.find("\"dp\":0");
  ASSERT_NE(first, std::string::npos);
  split.insert(first, "\"ep\":0,\"expert_shard\":[5,3],");
  std::ofstream(index) << split;
  try {
    launch::checkpoint::read_index(index);
    ADD_FAILURE() << "a reversed expert shard was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), index + ": key 'expert_shard' in 'files[0]': expected [begin, end]");
  }
}

// train.nonfinite: stop ends the run before the update naming the first
// parameter with a non-finite gradient; skip drops the update and stops
// after nonfinite_limit in a row.
TEST(Faults, NonFinitePolicy) {
  auto r = train("nan,step=2,phase=reduction", "--set train.steps=3");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "gradient norm is nan at step 2 (first non-finite gradient on this rank: transformer.h."))
      << r.out;
  r = train("nan,step=2;nan,step=4,phase=backward", "--set train.steps=5 --set train.nonfinite=skip");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "loss is nan at step 2: update skipped (train.nonfinite: skip; 1 in a row")) << r.out;
  EXPECT_TRUE(contains(r.out, "gradient norm is nan at step 4")) << r.out;
  r = train("nan,step=2;nan,step=3", "--set train.steps=5 --set train.nonfinite=skip --set train.nonfinite_limit=2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "after 2 non-finite steps in a row (train.nonfinite_limit)")) << r.out;
}

// A NaN loss on one tensor rank only: every rank agrees and stops (no rank
// goes on into the optimizer's collectives and hangs).
TEST(Faults, NonFiniteLossOnOneRankStopsEveryRank) {
  const auto r = train("nan,step=2,rank=1", "--set train.steps=3 --set parallel.tensor=2 --set parallel.timeout_s=30",
                       "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 0] error: loss is not finite on another rank at step 2")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] error: loss is nan at step 2")) << r.out;
  EXPECT_FALSE(contains(r.out, "timed out")) << r.out;
}

// The losses of each step in a metrics file (the last record of a step
// wins: a resumed run appends).
std::map<int, std::string> losses_in(const std::string& metrics) {
  std::map<int, std::string> out;
  std::ifstream in(metrics);
  for (std::string l; std::getline(in, l);) {
    if (!contains(l, "\"type\":\"train\"")) continue;
    const size_t s = l.find("\"step\":") + 7, f = l.find("\"loss\":") + 7;
    out[std::stoi(l.substr(s))] = l.substr(f, l.find(',', f) - f);
  }
  return out;
}

// One rank of a data 2 x tensor 2 mesh is killed (SIGKILL) at step 5 while
// checkpoints are written every 2 steps in the background; --resume then
// ends with every step's loss equal (bitwise) to the uninterrupted run's.
TEST(Faults, KillOneRankAndResumeMatchesTheUninterruptedRun) {
  Scratch s("killresume");
  const std::string mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4";
  const std::string sets =
      "--set train.steps=6 --set parallel.data=2 --set parallel.tensor=2 --set model.layers=2 "
      "--set checkpoint.every=2 --set log.metrics=";
  ASSERT_EQ(train("", sets + s / "straight.jsonl", mpirun).code, 0);
  const std::string ck = fmt::format(" --set checkpoint.dir={}", s / "ck");
  const auto killed = train("kill,step=5,rank=3", sets + s / "resumed.jsonl" + ck, mpirun);
  EXPECT_NE(killed.code, 0) << killed.out;
  ASSERT_TRUE(fs::exists(s / "ck/latest")) << killed.out;
  const auto resumed = train("", sets + s / "resumed.jsonl" + ck + " --resume", mpirun);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_TRUE(contains(resumed.out, "resumed from")) << resumed.out;
  const auto straight = losses_in(s / "straight.jsonl");
  ASSERT_EQ(straight.size(), 6u);
  EXPECT_EQ(losses_in(s / "resumed.jsonl"), straight);
}

// The bytes of a checkpoint's rank files (params, optimizer state), by name.
std::map<std::string, std::string> state_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") {
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
  return out;
}

// `trident supervise` around `mpirun -np 4 trident train` (data 2 x tensor
// 2, ZeRO 1, a checkpoint every step): rank 1 killed at step 3 (attempt 0),
// rank 2 at step 5 (attempt 1), rank 3 stalled at step 6 (attempt 2: the
// others time out after parallel.timeout_s, their error ends the attempt,
// the stalled rank is torn down). Each restart resumes from the newest
// checkpoint by itself, and every step's loss and the final state (every
// rank file of the last checkpoint) equal the uninterrupted run's, bit for
// bit. With no restart left the job's own exit code comes back; bad words
// are exit 2.
TEST(Faults, SupervisedRunSurvivesKillsAndAHangBitForBit) {
  Scratch s("supervise");
  const std::string mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4";
  const std::string sets =
      "--set train.steps=7 --set parallel.data=2 --set parallel.tensor=2 --set parallel.zero=1 "
      "--set model.layers=2 --set checkpoint.every=1 --set checkpoint.keep=2 --set parallel.timeout_s=4 "
      "--set log.metrics=";
  ASSERT_EQ(train("", sets + s / "straight.jsonl" + " --set checkpoint.dir=" + s / "straight", mpirun).code, 0);
  const std::string faults = "kill,step=3,rank=1,attempt=0;kill,step=5,rank=2,attempt=1;stall,step=6,rank=3,attempt=2";
  auto supervised = [&](const std::string& options, const std::string& fault, const std::string& name) {
    return test::run_cli(fmt::format("TRIDENT_FAULT='{}' OMPI_MCA_mpi_yield_when_idle=1 {} supervise {} -- {} {}",
                                     fault, TRIDENT_BINARY, options, mpirun, TRIDENT_BINARY),
                         fmt::format("train {} --set eval.batches=0 {}{} --set checkpoint.dir={}",
                                     src("configs/demo.yaml"), sets, s / (name + ".jsonl"), s / name));
  };
  const test::CliRun r = supervised("--restarts 3 --grace 5", faults, "supervised");
  ASSERT_EQ(r.code, 0) << r.out;
  for (int a : {1, 2, 3}) EXPECT_TRUE(contains(r.out, fmt::format("supervise: attempt {} failed after", a))) << r.out;
  EXPECT_TRUE(contains(r.out, "supervise: the job finished (attempt 4, 3 restarts)")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 3 wrote no flight record")) << "the hang, diagnosed: " << r.out;
  const auto straight = losses_in(s / "straight.jsonl");
  ASSERT_EQ(straight.size(), 7u);
  EXPECT_EQ(losses_in(s / "supervised.jsonl"), straight);
  // what each failure cost: a restart record per restart, the hang's detection at least the timeout
  std::vector<std::string> restarts;
  std::ifstream metrics(s / "supervised.jsonl");
  for (std::string l; std::getline(metrics, l);)
    if (contains(l, "\"type\":\"restart\"")) restarts.push_back(l);
  ASSERT_EQ(restarts.size(), 3u) << r.out;
  auto number = [](const std::string& l, const std::string& key) {
    const size_t at = l.find("\"" + key + "\":");
    return at == std::string::npos ? -1.0 : std::stod(l.substr(at + key.size() + 3));
  };
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(number(restarts[i], "attempt"), double(i + 1)) << restarts[i];
    EXPECT_GT(number(restarts[i], "lost_s"), 0) << restarts[i];
    EXPECT_GE(number(restarts[i], "steps_redone"), 0) << restarts[i];
  }
  EXPECT_TRUE(contains(restarts[0], "\"cause\":\"exit code 137\"")) << restarts[0];
  EXPECT_GE(number(restarts[2], "detect_s"), 4.0) << "the hang: its peers waited parallel.timeout_s " << restarts[2];
  EXPECT_TRUE(contains(r.out, "restart (attempt 2) after exit code 137: ")) << r.out;
  ASSERT_EQ(latest(s / "supervised"), "step_00000007");
  const auto want = state_files(s / "straight/step_00000007");
  EXPECT_FALSE(want.empty());
  EXPECT_TRUE(state_files(s / "supervised/step_00000007") == want) << "the final state differs";
  // no restart left: the launcher's own exit code, said
  const test::CliRun once = supervised("--restarts 0", "kill,step=2,rank=1", "once");
  EXPECT_NE(once.code, 0) << once.out;
  EXPECT_NE(once.code, 2) << once.out;
  EXPECT_TRUE(contains(once.out, "supervise: restarts exhausted (0)")) << once.out;
  const test::CliRun none = test::run_cli(TRIDENT_BINARY, "supervise --restarts 2");
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_TRUE(contains(none.out, "supervise: expected the launch command after --")) << none.out;
  EXPECT_EQ(test::run_cli(TRIDENT_BINARY, "supervise --restarts -1 -- true").code, 2);
  // a job refusing its input is not restarted
  const test::CliRun refused =
      test::run_cli(TRIDENT_BINARY, fmt::format("supervise --restarts 3 -- {} train {} --set train.steps=0",
                                                TRIDENT_BINARY, src("configs/demo.yaml")));
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_TRUE(contains(refused.out, "supervise: attempt 1 refused its input (exit code 2): no restart")) << refused.out;
  EXPECT_FALSE(contains(refused.out, "attempt 2")) << refused.out;
}

// The flight recorder: rank 3 of a data 2 x tensor 2 mesh stalls (it stops
// making progress before step 2's forward). Its tensor peer (rank 2) and its
// data peers time out after parallel.timeout_s, write their records, and the
// diagnosis names rank 3 as the one that wrote none (hung outside
// communication); whoever reports first, rank 3 is named.
TEST(Faults, FlightRecorderNamesTheStalledRank) {
  Scratch s("flight");
  const auto r = train("stall,step=2,rank=3",
                       fmt::format("--set train.steps=3 --set parallel.data=2 --set parallel.tensor=2 "
                                   "--set parallel.timeout_s=3 --set log.flight_recorder={}",
                                   s / "fr"),
                       "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, fmt::format("flight recorder ({}/rank_*.json): this rank ", s / "fr"))) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 3 wrote no flight record within 2 s: it is hung outside communication")) << r.out;
  EXPECT_FALSE(fs::exists(s / "fr/rank_3.json"));
  EXPECT_TRUE(fs::exists(s / "fr/rank_2.json"));
}

// The diagnosis itself, on records written by hand: rank 1 is in another
// group's operation and never entered this one; rank 2 entered it; rank 3
// (whom rank 1 waits for) wrote nothing.
TEST(Faults, FlightRecorderDiagnosis) {
  Scratch s("diagnosis");
  parallel::flight::configure(s.dir, 0);
  parallel::flight::finished(parallel::flight::started("all_reduce", "data(0)", 2, 64, -1));
  const int64_t stuck = parallel::flight::started("all_reduce", "data(0)", 3, 64, -1);
  auto op = [](const char* name, const char* group, int seq, double end) {
    return fmt::format(R"({{"op":"{}","group":"{}","seq":{},"bytes":8,"peer":-1,"start":1,"end":{}}})", name, group,
                       seq, end);
  };
  std::ofstream(s / "rank_1.json") << R"({"rank":1,"waiting_for":[1,3],"operations":[)"
                                   << op("all_reduce", "data(0)", 2, 2) << "," << op("send", "pipeline(1)", 7, 0)
                                   << "]}";
  std::ofstream(s / "rank_2.json") << R"({"rank":2,"waiting_for":[0,1,2],"operations":[)"
                                   << op("all_reduce", "data(0)", 3, 0) << "]}";
  const std::string d = parallel::flight::diagnose_timeout(stuck, {0, 1, 2}, 0.2);
  EXPECT_TRUE(contains(d, "this rank 0 waits in all_reduce #3 on group data(0)")) << d;
  EXPECT_TRUE(contains(d, "ranks 2 entered it too")) << d;
  EXPECT_TRUE(contains(d,
                       "rank 1 never entered all_reduce #3 on group data(0); its last operation: send #7 on group "
                       "pipeline(1), waiting for"))
      << d;
  EXPECT_TRUE(contains(d, "rank 3 wrote no flight record")) << d;
  EXPECT_TRUE(contains(d, "(rank 1 waits for it)")) << d;
  EXPECT_TRUE(fs::exists(s / "rank_0.json"));
  parallel::flight::configure("", 0);
}

// TRIDENT_FAULT itself is validated.
TEST(Faults, BadFaultSpecIsRefused) {
  const auto r = train("explode,step=1", "--set train.steps=1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "TRIDENT_FAULT: 'explode,step=1': the kind: expected kill | stall | fail_write | nan | "
                       "slow | fp8_frozen_scales | fp8_e5m2_forward, found 'explode'"))
      << r.out;
  const auto slow = train("slow,step=1", "--set train.steps=1");
  EXPECT_EQ(slow.code, 2) << slow.out;
  EXPECT_TRUE(contains(slow.out, "TRIDENT_FAULT: 'slow,step=1': slow needs ms=M (milliseconds)")) << slow.out;
}

// The progress line names a straggler: rank 1 of data 2 is 400 ms late in
// every step (TRIDENT_FAULT slow), so its busy time (the step less its
// waits for the other rank) exceeds the median's and the line says "slowest
// rank 1"; the metrics records carry it too. Every line shows the memory
// headroom.
TEST(Faults, ProgressLineNamesTheSlowestRank) {
  Scratch s("straggler");
  const std::string mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2";
  const std::string sets = "--set train.steps=3 --set log.every=1 --set parallel.data=2 --set log.metrics=";
  const auto r = train("slow,rank=1,ms=400", sets + s / "slow.jsonl", mpirun);
  ASSERT_EQ(r.code, 0) << r.out;
  int named = 0, memory = 0;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    if (!contains(l, "[rank 0] step ")) continue;
    named += contains(l, "| slowest rank 1 +");
    memory += contains(l, "| mem ") && contains(l, "% free)");
  }
  EXPECT_EQ(named, 3) << r.out;
  EXPECT_EQ(memory, 3) << r.out;
  std::ifstream in(s / "slow.jsonl");
  int records = 0;
  for (std::string l; std::getline(in, l);)
    if (contains(l, "\"type\":\"train\"")) {
      ++records;
      EXPECT_TRUE(contains(l, "\"slowest_rank\":1")) << l;
      const size_t at = l.find("\"straggler_excess\":");
      ASSERT_NE(at, std::string::npos) << l;
      EXPECT_GT(std::stod(l.substr(at + 19)), 0.5) << l;  // 400 ms on a step of a few tens of ms
    }
  EXPECT_EQ(records, 3);
}

}  // namespace trident
