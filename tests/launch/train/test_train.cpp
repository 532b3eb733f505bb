// End to end: the demo recipe learns to within 10% of its entropy floor;
// the metrics file follows its schema; the CLI's exit codes and messages.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"
#include "tests/test_util.hpp"

namespace trident {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

using test::CliRun;
CliRun run(const std::string& args) { return test::run_cli(TRIDENT_BINARY, args); }
CliRun run_env(const std::string& env, const std::string& args) {
  return test::run_cli(env + " " + std::string(TRIDENT_BINARY), args);
}

// A stop signal (SIGTERM to the process, or SIGUSR1 to mpirun, which
// forwards it to every rank) ends the run after the current step with a
// checkpoint and exit code 0; --resume continues after it.
// Where the launcher's own exit code says nothing (mpirun signalled with
// SIGTERM exits 1), checkpoint.dir/stopped.json says the stop was clean.
// repeat: once the run says it is stopping, the same signal again at every
// poll until it exits (a scheduler or a user that signals twice): the
// whole shutdown (the save, the marker, MPI's end) absorbs them.
void stop_and_resume(const std::string& launcher, int sig, const std::string& name, const std::string& mesh = "",
                     bool exits_zero = true, bool repeat = false) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_signal_" + name + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string metrics = dir + "/metrics.jsonl";
  const std::string args = fmt::format(
      "{} {} train {} --set train.steps=100000 --set eval.batches=0 --set "
      "log.metrics={} --set checkpoint.dir={}/ck --set train.micro_batch=4 --set "
      "train.global_batch=8 {}",
      launcher, TRIDENT_BINARY, src("configs/demo.yaml"), metrics, dir, mesh);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    execl("/bin/sh", "sh", "-c", ("exec " + args + " > " + dir + "/out.txt 2>&1").c_str(), (char*)nullptr);
    _exit(127);
  }
  auto train_records = [&] {
    std::ifstream f(metrics);
    int n = 0;
    for (std::string l; std::getline(f, l);) n += l.find("\"type\":\"train\"") != std::string::npos;
    return n;
  };
  for (int i = 0; i < 600 && train_records() < 3; ++i) usleep(100000);
  if (train_records() < 3) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::ifstream f(dir + "/out.txt");
    FAIL() << "the run did not start: "
           << std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  kill(pid, sig);
  int status = 0;
  if (repeat) {
    auto said_stopping = [&] {
      std::ifstream f(dir + "/out.txt");
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      return text.find("stopping after step") != std::string::npos;
    };
    int signals = 1;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (said_stopping()) kill(pid, sig), ++signals;
      usleep(20000);
    }
    EXPECT_GT(signals, 1) << "the run ended before a second signal could be sent";
  } else {
    waitpid(pid, &status, 0);
  }
  std::ifstream out_file(dir + "/out.txt");
  const std::string out((std::istreambuf_iterator<char>(out_file)), std::istreambuf_iterator<char>());
  // Repeated signals can reach mpirun after every rank has ended, in its own
  // teardown, where it takes them by their default action (killed by the
  // signal): the launcher's behaviour, not the run's. The run's word is then
  // its last line and stopped.json (checked below), as the Slurm script reads it.
  const bool launcher_killed_after_the_ranks =
      repeat && WIFSIGNALED(status) && WTERMSIG(status) == sig && out.find("stopped: ") != std::string::npos;
  if (!launcher_killed_after_the_ranks) {
    ASSERT_TRUE(WIFEXITED(status)) << out;
    if (exits_zero) EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  }
  EXPECT_NE(out.find("stopping after step"), std::string::npos) << out;
  const int steps = train_records();
  std::ifstream latest(dir + "/ck/latest");
  std::string l;
  latest >> l;
  EXPECT_EQ(l, fmt::format("step_{:08d}", steps)) << "the checkpoint is the last step the metrics record";
  // the run's own word that it stopped cleanly, naming that checkpoint
  std::ifstream marker(dir + "/ck/stopped.json");
  const std::string said((std::istreambuf_iterator<char>(marker)), std::istreambuf_iterator<char>());
  EXPECT_EQ(said, fmt::format("{{\"stopped\": true, \"signal\": \"{}\", \"step\": {}, \"checkpoint\": \"{}\"}}\n",
                              sig == SIGTERM ? "SIGTERM" : "SIGUSR1", steps, l))
      << out;
  // resume: two more steps, appended to the same metrics file
  CliRun r =
      run(fmt::format("train {} --resume --set train.steps={} --set eval.batches=0 --set log.metrics={} "
                      "--set checkpoint.dir={}/ck --set train.micro_batch=4 --set train.global_batch=8",
                      src("configs/demo.yaml"), steps + 2, metrics, dir));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(fmt::format("after step {}", steps)), std::string::npos) << r.out;
  EXPECT_EQ(train_records(), steps + 2);
  EXPECT_FALSE(fs::exists(dir + "/ck/stopped.json")) << "a run that went on is no longer stopped";
  fs::remove_all(dir);
}

TEST(Train, SigtermSavesAndExitsZero) { stop_and_resume("", SIGTERM, "term"); }
TEST(Train, SigusrThroughMpirunStopsEveryRank) {
  stop_and_resume("mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2", SIGUSR1, "usr1",
                  "--set parallel.data=2");
}
// Signals repeated through the whole shutdown (after the save, while the
// ranks end) change nothing: exit 0 (or mpirun itself killed by one in its
// own teardown, after the ranks' last line), the checkpoint and the marker as
// for one.
TEST(Train, RepeatedSigusrThroughMpirunStillExitsZero) {
  stop_and_resume("mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2", SIGUSR1, "usr1_again",
                  "--set parallel.data=2", true, /*repeat=*/true);
}
// SIGTERM to mpirun: every rank saves and stops; mpirun's exit code is its
// own (1), stopped.json is the run's.
TEST(Train, SigtermThroughMpirunLeavesTheStopMarker) {
  stop_and_resume("mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2", SIGTERM, "term_mpirun",
                  "--set parallel.data=2", /*exits_zero=*/false);
}

// A full disk during a save (a file size limit: every save's file is too
// big): each save fails with an error, the previous checkpoint and `latest`
// stay, no temporary is left, and training runs on; the last step's save
// failing too, the run ends with exit 1.
// A metrics file that cannot be written (a full device) fails the run: exit 1, naming the file.
TEST(Train, UnwritableMetricsIsAnError) {
  const CliRun r = run("train " + src("configs/demo.yaml") +
                       " --set train.steps=2 --set eval.batches=0 --set log.metrics=/dev/full");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("log.metrics: writing '/dev/full' failed"), std::string::npos) << r.out;
}

// A run never destroys another run's history. A fresh run keeps an earlier
// run's metrics file as PATH.1 (then .2, ...) instead of truncating it;
// resuming from a checkpoint outside checkpoint.dir (an import, another
// run's) into a directory that holds checkpoints is
// refused (exit 2, naming the directory and what it holds), leaving its
// checkpoints, `latest` and metrics as they were.
TEST(Train, NoRunOverwritesAnotherRunsHistory) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_history_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string metrics = dir + "/metrics.jsonl";
  auto lines = [](const std::string& path) {
    std::ifstream f(path);
    int n = 0;
    for (std::string l; std::getline(f, l);) ++n;
    return n;
  };
  const std::string common =
      "train " + src("configs/demo.yaml") + " --set eval.batches=0 --set model.layers=1 --set log.metrics=" + metrics;
  CliRun r = run(common + " --set train.steps=3 --set checkpoint.dir=" + dir + "/a --set checkpoint.every=3");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(lines(metrics), 1 + 3);
  r = run(common + " --set train.steps=2 --set checkpoint.dir=" + dir + "/b --set checkpoint.every=2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("held an earlier run's records: kept as " + metrics + ".1"), std::string::npos) << r.out;
  EXPECT_EQ(lines(metrics + ".1"), 1 + 3) << "the first run's record, whole";
  EXPECT_EQ(lines(metrics), 1 + 2);
  // resume b's step 2 into a, which holds its own step 3: refused, nothing of a's changes
  const std::string latest_before = test::read_text(dir + "/a/latest");
  r = run(common + " --set train.steps=4 --set checkpoint.dir=" + dir + "/a --resume " + dir + "/b");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(
      r.out.find("checkpoint.dir " + dir + "/a already holds another run's checkpoints (`latest` -> step_00000003)"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(test::read_text(dir + "/a/latest"), latest_before);
  EXPECT_FALSE(fs::exists(dir + "/a/step_00000004"));
  EXPECT_FALSE(fs::exists(metrics + ".2")) << "a refused run keeps the metrics as they are";
  EXPECT_EQ(lines(metrics), 1 + 2);
  // its own latest continues as before (and appends)
  r = run(common + " --set train.steps=4 --set checkpoint.dir=" + dir + "/a --resume auto");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(lines(metrics), 1 + 2 + 1 + 1);
  fs::remove_all(dir);
}

TEST(Train, FailedSaveKeepsThePreviousCheckpointAndTrains) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_diskfull_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string common = fmt::format(
      "--set eval.batches=0 --set log.metrics= --set checkpoint.dir={} --set train.micro_batch=4 "
      "--set train.global_batch=8",
      dir);
  CliRun first = run(fmt::format("train {} --set train.steps=3 {}", src("configs/demo.yaml"), common));
  ASSERT_EQ(first.code, 0) << first.out;
  const std::string cmd = fmt::format(
      "bash -c \"trap '' XFSZ; ulimit -f 8000; exec {} train {} --resume --set "
      "train.steps=6 --set checkpoint.every=1 {}\" 2>&1",
      TRIDENT_BINARY, src("configs/demo.yaml"), common);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1) << "the last step's save failed too: " << out;
  EXPECT_NE(out.find("checkpoint after step 4 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("the previous checkpoint (step_00000003"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint after step 5 failed"), std::string::npos) << "training went on: " << out;
  EXPECT_NE(out.find("the checkpoint after step 6 (the last step's save) failed"), std::string::npos) << out;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "run.lock", "step_00000003"}));
  fs::remove_all(dir);
}

// A non-finite loss never becomes a checkpoint: with keep = 1 the last good
// checkpoint (step 3) stays `latest`, the run exits 1 naming the step, and it
// resumes from step 3.
TEST(Train, NonFiniteLossIsNeverSaved) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_nan_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string args = fmt::format(
      "train {} --set train.steps=4 --set eval.batches=0 --set log.metrics= --set checkpoint.dir={} "
      "--set checkpoint.every=1 --set checkpoint.keep=1",
      src("configs/demo.yaml"), dir);
  setenv("TRIDENT_FAULT", "nan,step=4", 1);
  const CliRun bad = run(args);
  unsetenv("TRIDENT_FAULT");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("loss is nan at step 4"), std::string::npos) << bad.out;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "run.lock", "step_00000003"}));
  const CliRun resumed = run(args + " --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("step      4/4"), std::string::npos) << resumed.out;
  fs::remove_all(dir);
}

// kill -9 at arbitrary moments of a run that saves every step: `latest`
// always names a complete checkpoint, and the run resumes from it. Each
// attempt waits for its run to complete a save of its own (an event, however
// busy the machine), then kills it a different time later: inside the next
// step, or inside the next save.
TEST(Train, KillDuringSaveLeavesALoadableCheckpoint) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // a wider model: each save writes ~60 MB, so kills land inside saves too
  const std::string common = fmt::format(
      "--set eval.batches=0 --set log.metrics= --set checkpoint.dir={} --set checkpoint.every=1 "
      "--set checkpoint.keep=2 --set model.hidden=512 --set model.heads=8 --set train.micro_batch=1 "
      "--set train.global_batch=1",
      dir);
  auto latest_step = [&]() -> int64_t {
    std::ifstream in(dir + "/latest");
    std::string name;
    in >> name;
    return name.size() > 5 ? std::stoll(name.substr(5)) : -1;
  };
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int64_t before = latest_step();
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string cmd = fmt::format("exec {} train {} --resume --set train.steps=100000 {} > /dev/null 2>&1",
                                          TRIDENT_BINARY, src("configs/demo.yaml"), common);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (latest_step() <= before && std::chrono::steady_clock::now() < deadline &&
           waitpid(pid, nullptr, WNOHANG) == 0)
      usleep(20000);
    usleep(useconds_t(60000 * attempt));  // different moments of the step / save cycle
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ASSERT_GT(latest_step(), before) << "attempt " << attempt << ": the run completed no save";
    std::ifstream latest(dir + "/latest");
    std::string l;
    latest >> l;
    EXPECT_TRUE(fs::exists(dir + "/" + l + "/index.json")) << "latest names an incomplete checkpoint: " << l;
  }
  std::ifstream latest(dir + "/latest");
  std::string l;
  latest >> l;
  ASSERT_FALSE(l.empty()) << "no checkpoint completed in four attempts";
  const int64_t step = std::stoll(l.substr(5));
  CliRun r = run(fmt::format("train {} --resume --set train.steps={} {}", src("configs/demo.yaml"), step + 1, common));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(fmt::format("resumed from {}/{} after step {}", dir, l, step)), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(Train, DemoReachesEntropyFloor) {
  Recipe r = load_recipe(src("configs/demo.yaml"), {"log.metrics="});
  launch::TrainSummary s = launch::train(r, {.quiet = true});
  ASSERT_GT(s.entropy_floor, 0);
  EXPECT_LT(s.final_val_loss, 1.10 * s.entropy_floor)
      << "val loss " << s.final_val_loss << " floor " << s.entropy_floor;
  EXPECT_LT(s.losses.back(), 0.5 * s.losses.front());
}

TEST(Train, LlamaLearns) {
  Recipe r = load_recipe(src("configs/llama-tiny.yaml"), {"log.metrics=", "train.steps=150"});
  launch::TrainSummary s = launch::train(r, {.quiet = true});
  EXPECT_LT(s.losses.back(), s.losses.front() - 0.3);
}

TEST(Train, MoeTinyReachesEntropyFloor) {
  Recipe r = load_recipe(src("configs/moe-tiny.yaml"), {"log.metrics="});
  launch::TrainSummary s = launch::train(r, {.quiet = true});
  ASSERT_GT(s.entropy_floor, 0);
  EXPECT_LT(s.final_val_loss, 1.10 * s.entropy_floor)
      << "val loss " << s.final_val_loss << " floor " << s.entropy_floor;
}

TEST(Train, MetricsSchemaAndDeterminism) {
  std::string path =
      std::filesystem::temp_directory_path() / ("trident_metrics_" + std::to_string(getpid()) + ".jsonl");
  std::vector<std::string> sets = {"train.steps=6", "eval.every=3", "log.metrics=" + path, "model.layers=1"};
  launch::TrainSummary a = launch::train(load_recipe(src("configs/demo.yaml"), sets), {.quiet = true});
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 1u + 6u + 2u);
  EXPECT_NE(lines[0].find("\"type\":\"start\""), std::string::npos);
  EXPECT_NE(lines[0].find("\"entropy_floor\":1.13"), std::string::npos) << lines[0];
  for (std::string key : {"\"step\":", "\"loss\":", "\"lr\":", "\"grad_norm\":", "\"tokens_per_s\":", "\"mfu\":",
                          "\"peak_bytes\":{\"params\":", "\"activations\":"})
    EXPECT_NE(lines[1].find(key), std::string::npos) << key << " in " << lines[1];
  EXPECT_NE(lines[4].find("\"type\":\"eval\",\"step\":3,\"val_loss\":"), std::string::npos) << lines[4];
  std::filesystem::remove(path);
  // same recipe, same losses (bitwise): sampling and init are pure functions of the seed
  launch::TrainSummary b = launch::train(
      load_recipe(src("configs/demo.yaml"), {"train.steps=6", "log.metrics=", "model.layers=1"}), {.quiet = true});
  EXPECT_EQ(a.losses, b.losses);
}

// The progress line shows what docs/metrics.md says it shows, each number
// the metrics record's rounded: loss, lr, grad norm, tok/s, mfu, eta, mem,
// and for an MoE model aux, z and the worst layer's load.
TEST(Train, ProgressLineShowsWhatTheDocsSay) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("trident_progress_" + std::to_string(getpid()) + ".jsonl");
  std::filesystem::remove(path);
  const CliRun r = run("train " + src("configs/moe-tiny.yaml") +
                       " --set train.steps=2 --set log.every=1 --set eval.batches=0 --set log.metrics=" + path);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::regex line(
      R"(step +2/2 \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| grad norm ([0-9.]+) \| ([0-9]+) tok/s \| mfu ([0-9.]+)% \| )"
      R"(eta [0-9a-z.]+ \| mem [0-9.]+ [KMGT]?i?B of [0-9.]+ [KMGT]?i?B \([0-9]+% free\) \| aux ([0-9.]+) \| z ([0-9.]+) \| )"
      R"(expert load max/mean ([0-9.]+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
  std::ifstream in(path);
  nlohmann::json step2;
  for (std::string l; std::getline(in, l);) {
    const auto j = nlohmann::json::parse(l);
    if (j["type"] == "train" && j["step"] == 2) step2 = j;
  }
  ASSERT_FALSE(step2.is_null()) << "no step 2 record in " << path;
  // the printed digits' half unit, and a little for the record's own rounding (docs/metrics.md)
  auto near = [&](int group, double want, double half_unit) {
    EXPECT_NEAR(std::stod(m[group].str()), want, 1.02 * half_unit) << m[0].str() << " vs " << step2.dump();
  };
  near(1, step2["loss"].get<double>(), 5e-5);
  near(2, step2["lr"].get<double>(), 5e-4 * step2["lr"].get<double>());
  near(3, step2["grad_norm"].get<double>(), 5e-4);
  near(6, step2["aux_loss"].get<double>(), 5e-5);
  near(7, step2["z_loss"].get<double>(), 5e-5);
  EXPECT_GT(std::stod(m[7].str()), 0) << "z-loss weight 0.001 gives a z-loss";
  double worst = 0;
  for (const auto& layer : step2["expert_load"]) worst = std::max(worst, layer["imbalance"].get<double>());
  near(8, worst, 5e-3);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".1");
}

// The MFU reference: measured once per machine and thread count, cached
// (the next run starts without measuring and says where the figure is
// from), and raised rather than exceeded: even a reference far too low
// never gives an MFU above 100%.
TEST(Train, MfuReferenceIsCachedAndNeverExceeded) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("trident_peak_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string env = "TRIDENT_CACHE_DIR=" + dir;
  const std::string args = "train " + src("configs/demo.yaml") + " --set train.steps=3 --set eval.batches=0 ";
  CliRun first = run_env(env, args + "--set log.metrics=");
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("(measured sgemm)"), std::string::npos) << first.out;
  ASSERT_TRUE(fs::exists(dir + "/gemm_peak.json"));
  CliRun second = run_env(env, args + "--set log.metrics=");
  EXPECT_NE(second.out.find("(sgemm measured "), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("cached in " + dir + "/gemm_peak.json"), std::string::npos) << second.out;
  const std::string metrics = dir + "/m.jsonl";
  CliRun low = run_env(env, args + "--set log.peak_flops=1e6 --set log.metrics=" + metrics);
  EXPECT_EQ(low.code, 0) << low.out;
  EXPECT_NE(low.out.find("is below what step 2 achieved"), std::string::npos) << low.out;
  std::ifstream in(metrics);
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"mfu\":");
    if (at == std::string::npos) continue;
    ++records;
    EXPECT_LE(std::stod(line.substr(at + 6)), 1.0) << line;
  }
  EXPECT_EQ(records, 3);
  fs::remove_all(dir);
}

TEST(Cli, ExitCodesAndMessages) {
  CliRun ok = run("--version");
  EXPECT_EQ(ok.code, 0);
  EXPECT_NE(ok.out.find("oneDNN"), std::string::npos);
  CliRun bad = run("train " + src("configs/demo.yaml") + " --set train.steps=0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(
      bad.out.find("--set train.steps=0: key 'train.steps': expected an integer in [1, 1099511627776], found '0'"),
      std::string::npos)
      << bad.out;
  EXPECT_EQ(run("train").code, 2);
  // trident schedule: the simulator's timeline and the published bubble
  CliRun sched = run("schedule --pipeline 4 --micro-batches 8 --schedule 1f1b");
  EXPECT_EQ(sched.code, 0) << sched.out;
  EXPECT_NE(sched.out.find("rank  3 | . . .F0B0B0F1"), std::string::npos) << sched.out;
  EXPECT_NE(sched.out.find("bubble 27.27% (formula 27.27%)"), std::string::npos) << sched.out;
  CliRun bad_sched = run("schedule --pipeline 4 --micro-batches 6 --virtual-stages 2 --schedule interleaved_1f1b");
  EXPECT_EQ(bad_sched.code, 2);
  EXPECT_NE(bad_sched.out.find("micro-batches(6) % pipeline(4) = 2 != 0"), std::string::npos) << bad_sched.out;
  EXPECT_EQ(run("schedule --pipeline 4 --micro-batches 8 --schedule pipedream").code, 2);
  EXPECT_EQ(run("schedule --micro-batches 8 --schedule 1f1b").code, 2);
  // a schedule too large to simulate is refused at once, with the product
  CliRun huge = run("schedule --pipeline 100000 --micro-batches 100000 --schedule 1f1b");
  EXPECT_EQ(huge.code, 2);
  EXPECT_NE(huge.out.find("pipeline(100000) x virtual stages(1) x micro-batches(100000) = 10000000000"),
            std::string::npos)
      << huge.out;
  EXPECT_EQ(run("frobnicate").code, 2);
  EXPECT_EQ(run("train /nonexistent.yaml").code, 2);
  EXPECT_EQ(run("prepare --input /nonexistent.txt --out /tmp/x").code, 2);
  CliRun data =
      run("train " + src("configs/demo.yaml") + " --set data.train=/nonexistent/ds --set data.synthetic=null");
  EXPECT_EQ(data.code, 2) << data.out;
  EXPECT_NE(data.out.find("/nonexistent/ds.idx: cannot open"), std::string::npos) << data.out;
}

// Multi-process launches: mpirun with a hostfile (the slots of localhost
// standing for nodes), the start-up report of launcher, nodes and mesh, and
// ranks started with different recipes.
TEST(Launch, HostfileReportsPlacementAndMesh) {
  namespace fs = std::filesystem;
  const std::string hosts = fs::temp_directory_path() / ("trident_hosts_" + std::to_string(::getpid()));
  std::ofstream(hosts) << "localhost slots=4\n";
  const CliRun r = test::run_cli(
      "OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none "
      "--hostfile " +
          hosts + " -np 4 " + std::string(TRIDENT_BINARY),
      "train " + src("configs/demo.yaml") +
          " --set parallel.data=2 --set parallel.tensor=2 --set train.steps=2 --set eval.batches=0 --set log.metrics=");
  fs::remove(hosts);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("launch: mpirun | 4 ranks on 1 node"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("): ranks 0-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mesh: data 2 x tensor 2 x pipeline 1 (order tensor, context, data, pipeline"),
            std::string::npos)
      << r.out;
}

TEST(Launch, LauncherWithoutMpiWorldIsRefused) {
  // srun --mpi=none: caught before MPI starts
  CliRun r = run_env("SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_JOB_ID=1",
                     "train " + src("configs/demo.yaml") + " --set parallel.data=4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("srun started 4 tasks without an MPI plugin"), std::string::npos) << r.out;
  // a launcher whose MPI wire-up failed: every task is a world of one
  r = run_env("SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_JOB_ID=1 SLURM_MPI_TYPE=pmix",
              "train " + src("configs/demo.yaml") + " --set parallel.data=4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("srun started 4 tasks, but MPI sees a world of 1"), std::string::npos) << r.out;
}

TEST(Launch, RanksWithDifferentRecipesAreRefused) {
  const std::string train = std::string(TRIDENT_BINARY) + " train " + src("configs/demo.yaml") +
                            " --set parallel.data=2 --set eval.batches=0 --set log.metrics= --set train.steps=";
  const CliRun r = test::run_cli(
      "OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root "
      "--oversubscribe --bind-to none -np 1 " +
          train + "2 : -np 1",
      train + "3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("error: the ranks disagree on the recipe (its text and --set options): rank 0 has"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 1 has"), std::string::npos) << r.out;
}

}  // namespace trident
