// The command line's contract (docs/commands.md, "Errors and exit codes"):
// every kind of bad word is one line `error: trident CMD: --flag: expected
// ..., found '...'` and exit 2, in Trident's words, never CLI11's; every count
// a user can type has a bound and is refused at once past it (no command
// starts work it cannot finish); an output place or cache directory the
// user named that cannot be used is exit 2 before any work; a sweep in which
// no mesh ran is a failure. One test per row of the table.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "tests/test_util.hpp"

namespace trident {
namespace fs = std::filesystem;

namespace {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

using test::Scratch;

test::CliRun trident(const std::string& args) { return test::run_cli(TRIDENT_BINARY, args); }

bool has(const test::CliRun& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

// The one error line of a refused command line.
void expect_refused(const std::string& args, const std::string& line) {
  const auto t0 = std::chrono::steady_clock::now();
  const test::CliRun r = trident(args);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_TRUE(has(r, "error: " + line)) << args << "\nexpected: error: " << line << "\nfound: " << r.out;
  for (const char* cli11 : {"The following argument", "At Most", "Could not convert", "required but received",
                            " is required", " excludes ", "INT:N"})
    EXPECT_FALSE(has(r, cli11)) << args << ": CLI11's own words: " << r.out;
  // refused before any work: a command line is judged in well under the time any command takes
  EXPECT_LT(secs, 10) << args;
}

// A read-only file system at `dir` (root: a tmpfs mounted read-only), or "" where mounting is not allowed.
struct ReadOnlyDir {
  std::string dir;
  explicit ReadOnlyDir(const std::string& where) {
    fs::create_directories(where);
    if (mount("none", where.c_str(), "tmpfs", MS_RDONLY, "size=1m") == 0) dir = where;
  }
  ~ReadOnlyDir() {
    if (!dir.empty()) umount(dir.c_str());
  }
};

}  // namespace

// Each kind of CLI11 parse error, in the documented form.
TEST(Cli, EveryKindOfBadWordIsOneLineInTheDocumentedForm) {
  const std::string demo = src("configs/demo.yaml");
  // an option the command does not take, and a second positional argument
  expect_refused("train " + demo + " --steps 3",
                 "trident train: --steps: expected one of --help, --resume, --set, found '--steps 3'");
  expect_refused("train " + demo + " other.yaml", "trident train: other.yaml: expected no more arguments");
  // a repeated option, a value of the wrong type, out of range, missing
  expect_refused("sample x --tokens 5 --tokens 6",
                 "trident sample: --tokens: expected one value (the option given once), found 2");
  expect_refused("sample x --tokens 2.5", "trident sample: --tokens: expected an integer in [0, 1048576], found '2.5'");
  expect_refused("prepare --workers 2147483648",
                 "trident prepare: --workers: expected an integer in [1, 1024], found '2147483648'");
  expect_refused("sample x --tokens", "trident sample: --tokens: expected a value (INT:[0, 1048576]), found none");
  expect_refused("sample x --temperature warm",
                 "trident sample: --temperature: expected a number in [0, 1000000], found 'warm'");
  expect_refused("prepare --valid-fraction 1",
                 "trident prepare: --valid-fraction: expected a number in [0, 1), found '1'");
  // a required option missing, two that exclude each other, a bad choice, an unknown command
  expect_refused("plan " + demo,
                 "trident plan: --cluster: expected a value (CLUSTER.yaml), found none (a required option)");
  expect_refused("sample x --prompt a --prompt-ids 1",
                 "trident sample: --prompt: expected --prompt or --prompt-ids, not both, found both");
  expect_refused(
      "schedule --pipeline 2 --micro-batches 4 --schedule fast",
      "trident schedule: --schedule: expected gpipe | 1f1b | interleaved_1f1b | zero_bubble | dualpipev, found 'fast'");
  expect_refused("trian " + demo, "trident: trian: expected a command (train | prepare");
}

// Every count has a bound: past it, exit 2 at once naming the bound.
TEST(Cli, CountsPastTheirBoundsAreRefusedAtOnce) {
  const std::string demo = src("configs/demo.yaml"), cluster = src("configs/clusters/dgx-h100.yaml");
  expect_refused("plan " + demo + " --cluster " + cluster + " --gpus 1099511627776",
                 "trident plan: --gpus: expected an integer in [1, 1048576], found '1099511627776'");
  expect_refused("plan " + demo + " --cluster " + cluster + " --gpus 9223372036854775808",
                 "trident plan: --gpus: expected an integer in [1, 1048576], found '9223372036854775808'");
  expect_refused("topology " + demo + " --world 2147483648",
                 "trident topology: --world: expected an integer in [1, 1048576], found '2147483648'");
  expect_refused("sample x --tokens 99999999999",
                 "trident sample: --tokens: expected an integer in [0, 1048576], found '99999999999'");
  expect_refused("sweep " + demo + " --cluster " + cluster + " --warmup 1099511627776",
                 "trident sweep: --warmup: expected an integer in [0, 1048576], found '1099511627776'");
  expect_refused("submit " + demo + " --nodes 0",
                 "trident submit: --nodes: expected an integer in [1, 1048576], found '0'");
  expect_refused("schedule --pipeline 5000 --micro-batches 8 --schedule 1f1b",
                 "schedule: pipeline(5000) x virtual stages(1) x micro-batches(8) = 40000 stage-chunk-micro-batches; "
                 "the simulator takes at most 1048576 (pipeline <= 4096");
  expect_refused(
      "schedule --pipeline 4 --micro-batches 99999999999999 --schedule 1f1b",
      "trident schedule: --micro-batches: expected an integer in [1, 1099511627776], found '99999999999999'");
  // at the bound the answer still comes at once: every rank of a 2^20 world
  // (the group lists of a long evenly spaced group abbreviated), and the
  // meshes that would fit it
  test::CliRun r = trident("topology " + demo +
                           " --world 1048576 --set parallel.data=1048576 --set "
                           "train.global_batch=1048576 --set train.micro_batch=1 | tail -1");
  EXPECT_EQ(r.code, 0) << r.out.substr(0, 2000);
  EXPECT_TRUE(has(r, "1048575     0 1048575    0    0  [1048575]")) << r.out.substr(0, 2000);
  r = trident("topology " + demo +
              " --world 1048576 --set parallel.data=1 --set train.global_batch=1048576 --set train.micro_batch=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r,
                  "set parallel.data=auto (data 1048576 on 1048576 ranks), or use one of the meshes (data x tensor "
                  "x pipeline) of 1048576 ranks this recipe can use: 1048576x1x1, 524288x1x2"))
      << r.out.substr(0, 2000);
  r = trident("plan " + demo + " --cluster " + cluster + " --gpus 1048576 --top 1");
  EXPECT_NE(r.code, 1) << r.out.substr(0, 2000);
}

// parallel.expert: `trident topology` shows the expert and expert-data
// groups; a run with it says how the experts are split and reports the
// load of each expert rank.
TEST(Cli, ExpertGroupsShownAndTrainingReportsTheirLoad) {
  Scratch s("cli_expert");
  const std::string moe = src("configs/moe-tiny.yaml");
  test::CliRun r = trident("topology " + moe + " --world 4 --set parallel.data=4 --set parallel.expert=2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "experts: expert 2 x expert_data 2 (data x context = 4) x pipeline 1 x tensor 1")) << r.out;
  EXPECT_TRUE(has(r, "expert_data")) << r.out;
  r = trident("topology " + moe + " --world 4 --set parallel.data=4 --set parallel.expert=3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "expert(3)")) << r.out;
  r = test::run_cli(
      "OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 " +
          std::string(TRIDENT_BINARY),
      "train " + moe +
          " --set parallel.data=2 --set parallel.expert=2 --set log.metrics= --set train.steps=2 --set log.every=1 "
          "--set eval.batches=0 --set train.threads=1 --set model.moe.shared_experts=1 --set log.trace=" +
          (s / "trace.json"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "expert parallel 2: each rank holds 4 of each MoE layer's 8 experts")) << r.out;
  EXPECT_TRUE(has(r, "| expert rank load ")) << r.out;
  // the trace: step 2's dispatches (while the shared experts compute) and combines on 2 ranks, 2 micro-batches
  // each, 3 MoE layers, forward and backward; each with the part waited for inside it
  std::ifstream in(s / "trace.json");
  const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = trace.find(what); at != std::string::npos; at = trace.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("\"expert dispatch\""), 2u * 2 * 3 * 2) << trace.substr(0, 400);
  EXPECT_EQ(count("\"expert combine\""), 2u * 2 * 3 * 2);
  EXPECT_EQ(count("\"expert (waiting)\""), 2u * 2 * 2 * 3 * 2);
  // whole experts carved out of data x context x tensor: the start-up line counts the tensor ranks too
  r = test::run_cli(
      "OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 " +
          std::string(TRIDENT_BINARY),
      "train " + moe +
          " --set parallel.tensor=2 --set parallel.expert=2 --set parallel.expert_tensor=1 --set log.metrics= "
          "--set train.steps=1 --set eval.batches=0 --set train.threads=1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "data parallel 2 (data inferred: parallel.data auto = 4 ranks / the other axes)")) << r.out;
  EXPECT_TRUE(has(r,
                  "expert parallel 2: each rank holds 4 of each MoE layer's 8 experts, whole; their gradients "
                  "reduce over expert-data 2 (data x context x tensor / expert)"))
      << r.out;
}

// A sweep in which no mesh ran is a failure, with no results written; an
// unusable --out is refused before any mesh runs.
TEST(Cli, SweepWithNoValidMeshFailsAndWritesNothing) {
  Scratch s("cli_sweep");
  const std::string demo = src("configs/demo.yaml"), cluster = src("configs/clusters/dgx-h100.yaml");
  // a stage split for two stages: no mesh of one rank can take it
  test::CliRun r = trident(fmt::format(
      "sweep {} --cluster {} --meshes 1,1,1 --set 'parallel.stage_layers=[1,3]' --out {}", demo, cluster, s / "out"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "sweep: no mesh ran: all 1 meshes are not valid")) << r.out;
  EXPECT_FALSE(fs::exists(s / "out")) << "nothing written";
  std::ofstream(s / "file") << "x";
  r = trident(fmt::format("sweep {} --cluster {} --meshes 1,1,1 --out {}/sub", demo, cluster, s / "file"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "sweep: --out: expected a directory it can write, found '")) << r.out;
}

// The exit-code rule for places the user named: unusable (missing, a file,
// read-only) is bad input, exit 2, before any work, in every command.
TEST(Cli, UnusableOutputPlacesAreBadInputEverywhere) {
  Scratch s("cli_out");
  std::ofstream(s / "in.txt") << "one document\n\nanother one\n";
  std::ofstream(s / "file") << "x";
  // prepare into a directory, or under a file
  test::CliRun r = trident(fmt::format("prepare --input {} --out {}/ --valid-fraction 0", s / "in.txt", s.dir));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "expected a dataset prefix (a directory and a name, like data/corpus), found a directory"))
      << r.out;
  EXPECT_EQ(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator{}), 2) << "nothing written";
  r = trident(fmt::format("prepare --input {} --out {}/x --valid-fraction 0", s / "in.txt", s / "file"));
  EXPECT_EQ(r.code, 2) << r.out;
  // a data.cache_dir the user named: missing, a file
  for (const std::string& dir : {s / "missing", s / "file"}) {
    r = trident(fmt::format("prepare --input {} --out {} --valid-fraction 0 --force", s / "in.txt", s / "ds"));
    ASSERT_EQ(r.code, 0) << r.out;
    r =
        trident(fmt::format("train {} --set data.synthetic=null --set data.train={} --set model.vocab=256 --set "
                            "model.seq_len=4 --set train.global_batch=1 --set train.micro_batch=1 --set "
                            "train.steps=1 --set eval.every=0 --set log.metrics= --set data.cache_dir={}",
                            src("configs/demo.yaml"), s / "ds_train", dir));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(
        has(r, "key 'data.cache_dir': expected a directory this run can write the sample index to, found '" + dir))
        << r.out;
  }
  // read-only file systems (where this process may mount one)
  ReadOnlyDir ro(s / "ro");
  if (ro.dir.empty()) GTEST_SKIP() << "cannot mount a read-only tmpfs here (not root?): the read-only rows are not run";
  r = trident(fmt::format("prepare --input {} --out {}/x --valid-fraction 0", s / "in.txt", ro.dir));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "prepare: --out: expected a directory it can write, found '" + ro.dir)) << r.out;
  std::ofstream(s / "metrics.jsonl") << "{\"type\":\"train\",\"step\":1,\"loss\":2.5}\n";
  r = trident(fmt::format("report {} --out {}/report", s / "metrics.jsonl", ro.dir));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "report: --out: expected a directory it can create, found '" + ro.dir + "/report'")) << r.out;
  r = trident(fmt::format("sweep {} --cluster {} --meshes 1,1,1 --out {}/sweep", src("configs/demo.yaml"),
                          src("configs/clusters/dgx-h100.yaml"), ro.dir));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "sweep: --out: expected a directory it can write, found '" + ro.dir + "/sweep'")) << r.out;
  EXPECT_FALSE(has(r, "filesystem error")) << r.out;
  r =
      trident(fmt::format("train {} --set data.synthetic=null --set data.train={} --set model.vocab=256 --set "
                          "model.seq_len=4 --set train.global_batch=1 --set train.micro_batch=1 --set train.steps=1 "
                          "--set eval.every=0 --set log.metrics= --set data.cache_dir={}",
                          src("configs/demo.yaml"), s / "ds_train", ro.dir));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "key 'data.cache_dir': expected a directory this run can write the sample index to, found '" +
                         ro.dir + "' (not writable)"))
      << r.out;
}

// `submit --dry-run` writes the script it names (and submits nothing);
// `--cpus-per-task` reaches the job and its ranks' threads; GPUs asked for
// a `device: cpu` recipe are one warning line.
TEST(Cli, SubmitDryRunWritesItsScriptAndSaysWhatRunsWhere) {
  Scratch s("submit");
  const std::string demo = src("configs/demo.yaml");
  test::CliRun r = trident("submit " + demo + " --nodes 1 --tasks-per-node 2 --cpus-per-task 3 --gpus-per-node 1 " +
                           "--dry-run --log-dir " + s.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "#SBATCH --cpus-per-task=3\n")) << r.out;
  EXPECT_TRUE(has(r, "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK")) << r.out;
  EXPECT_TRUE(has(r, "--gpus-per-node 1 but " + demo + " says device: cpu: the job holds GPUs and trains on the CPUs"))
      << r.out;
  const auto at = r.out.find("--dry-run: the script is written to ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string rest = r.out.substr(at + 36);
  const std::string script = rest.substr(0, rest.find(','));
  ASSERT_TRUE(fs::exists(script)) << script;
  std::ifstream in(script);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("# Resubmit as it is with: sbatch " + script), std::string::npos) << text;
  EXPECT_TRUE(has(r, text.substr(0, 200))) << "the printed script is the written one";
  EXPECT_FALSE(has(r, "submit: job ")) << r.out;
  // without --cpus-per-task the job sets no thread count and says so
  r = trident("submit " + demo + " --nodes 1 --tasks-per-node 2 --dry-run --log-dir " + s.dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(has(r, "#SBATCH --cpus-per-task")) << r.out;
  EXPECT_TRUE(has(r, "no --cpus-per-task")) << r.out;
  EXPECT_FALSE(has(r, "GPUs")) << r.out;
}

}  // namespace trident
