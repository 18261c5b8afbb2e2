// The GPU rows' computed sample runs in a real tessera-gpu process (spawned by compute_pool on a
// private ipc endpoint, stopped at the end), checked against the in-process reference forward; a
// missing binary or a process that dies mid-run is an error of the experiment, never a fallback.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <random>

#include "tessera/experiment/compute.hpp"

using namespace tessera;
using namespace tessera::experiment;

namespace {

experiment_options small_gpu_rows() {
  return {.long_shares = {0.4},
          .saturation_requests = 60,
          .latency_requests = 60,
          .computed_requests = 12,
          .configs = {"gpu-dynamic", "gpu-packed", "hybrid"},
          .slo_points = 2};
}

compute_options tiny() {
  compute_options co;
  co.model = "bert-tiny";
  co.tile_processes = false;  // the tile rows are not under test here
  co.omp_threads = 1;
  return co;
}

bool alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

}  // namespace

TEST(experiment_gpu, gpu_rows_are_computed_by_a_tessera_gpu_process_and_checked) {
  auto pool = compute_pool::start(tiny());
  ASSERT_TRUE(pool) << pool.error().to_string();
  const pid_t pid = (*pool)->gpu_process().child_pid();
  ASSERT_TRUE(alive(pid));
  const std::string pid_text = "tessera-gpu process (pid " + std::to_string(pid) + ")";
  EXPECT_NE((*pool)->note().find("tessera-gpu process (GPU rows)"), std::string::npos) << (*pool)->note();

  auto o = small_gpu_rows();
  auto rows = run_seed_experiment(o, (*pool)->provider(), (*pool)->model());
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 3u);
  for (const auto& r : *rows) {
    EXPECT_EQ(r.computed, 12) << r.config;
    EXPECT_TRUE(r.modelled_match) << r.config;
    EXPECT_LE(r.max_logit_error, logit_tolerance_of(models::dtype::fp32)) << r.config;
    EXPECT_NE(r.check.find("gpu0: " + pid_text + " in fp32 vs in-process fp32 reference_forward"), std::string::npos)
        << r.config << ": " << r.check;
    EXPECT_NE(r.check.find("tolerance 1e-04"), std::string::npos) << r.check;
    if (r.config == "hybrid")  // long ones to the (in-process) tile engine, short ones to the process
      EXPECT_NE(r.check.find("tiles0: in-process tiles reference engine"), std::string::npos) << r.check;
    else
      EXPECT_NE(r.check.find(", 12 answers,"), std::string::npos) << r.check;
  }
  std::string md = rows_markdown(*rows, o, (*pool)->note());
  EXPECT_NE(md.find("| 40 | gpu-dynamic | gpu0: " + pid_text), std::string::npos) << md;

  // Stopped cleanly at the end: the process is gone (reaped, not a zombie).
  pool->reset();
  EXPECT_FALSE(alive(pid));
}

TEST(experiment_gpu, a_missing_tessera_gpu_is_an_error_not_a_fallback) {
  auto co = tiny();
  co.gpu_binary = "/nonexistent/tessera-gpu";
  auto pool = compute_pool::start(co);
  ASSERT_FALSE(pool);
  EXPECT_NE(pool.error().to_string().find("/nonexistent/tessera-gpu"), std::string::npos) << pool.error().to_string();
  EXPECT_NE(pool.error().to_string().find("tessera-gpu process"), std::string::npos) << pool.error().to_string();
}

TEST(experiment_gpu, a_tessera_gpu_killed_mid_run_fails_the_experiment) {
  auto pool = compute_pool::start(tiny());
  ASSERT_TRUE(pool) << pool.error().to_string();
  const pid_t pid = (*pool)->gpu_process().child_pid();
  // SIGKILL after a batch chosen at random (the moment is not ours), from the provider's side.
  const int kill_after = std::uniform_int_distribution<int>(1, 4)(*std::make_unique<std::random_device>());
  std::atomic<int> batches{0};
  auto inner = (*pool)->provider();
  struct killing final : backends::backend {
    std::shared_ptr<backends::backend> b;
    std::atomic<int>* n;
    int after;
    pid_t pid;
    backends::backend_info info() const override { return b->info(); }
    int64_t outstanding_tokens() const override { return b->outstanding_tokens(); }
    bool healthy() const override { return b->healthy(); }
    void submit(backends::batch_request r, std::function<void(backends::batch_result)> done) override {
      b->submit(std::move(r), std::move(done));
      if (++*n == after) kill(pid, SIGKILL);
    }
  };
  compute_provider p = [&](const configuration& c, const virtual_backend_spec& s) -> std::shared_ptr<backends::backend> {
    auto b = inner(c, s);
    if (s.kind == "tiles") return b;
    auto k = std::make_shared<killing>();
    k->b = b, k->n = &batches, k->after = kill_after, k->pid = pid;
    return k;
  };
  auto o = small_gpu_rows();
  o.configs = {"gpu-dynamic", "gpu-packed"};
  o.computed_requests = 24;
  auto rows = run_seed_experiment(o, p, (*pool)->model());
  ASSERT_GE(batches.load(), kill_after) << "the sample had fewer batches than the kill point";
  ASSERT_FALSE(rows) << "the run succeeded after its tessera-gpu process was killed (kill after batch " << kill_after << ")";
  EXPECT_NE(rows.error().to_string().find("computed requests failed"), std::string::npos) << rows.error().to_string();
  EXPECT_NE(rows.error().to_string().find("gpu0"), std::string::npos) << rows.error().to_string();
}
