#include "host_faults.hpp"

#include <signal.h>

#include <atomic>
#include <vector>

#include "tessera/common/log.hpp"

namespace tessera::host::app {

using exchange::fault_kind;

result<host_faults> load_host_faults(const std::string& spec, const fault_targets& targets) {
  auto plan = exchange::load_fault_plan(spec);
  if (!plan) return plan.error().with_context("--faults");
  host_faults out{plan->tile_side(), plan->host_side()};
  if (!out.tiles.empty()) {
    if (!targets.launches_tiles)
      return status::invalid("--faults: " + std::string(fault_kind_name(out.tiles.faults[0].kind)) +
                             " is applied by the tiles, and with --external this host does not launch them: pass "
                             "the plan to each tessera-tile (--faults) instead");
    TESSERA_RETURN_IF_ERROR(out.tiles.check_tiles(targets.tiles).with_context("--faults"));
  }
  for (size_t i = 0; i < plan->faults.size(); ++i) {
    const auto& f = plan->faults[i];
    if (f.kind != fault_kind::kill_gpu) continue;
    const std::string what = "--faults: fault " + std::to_string(i) + " (kill_gpu, gpu " + std::to_string(f.gpu) + ")";
    if (!targets.serves || f.gpu >= targets.spawned_gpus)
      return status::invalid(what + " needs a tessera-gpu process spawned by this host: serve (--model --serve) with "
                                    "--spawn-gpu " + std::to_string(f.gpu + 1) + " or more (a --gpu-endpoint "
                                    "process runs elsewhere and cannot be killed from here)");
  }
  return out;
}

namespace {

// Forwards everything to the GPU backend; counts the batches it answers and kills its process
// when the count reaches one of the plan's batches.
class gpu_fault_backend final : public backends::backend {
 public:
  gpu_fault_backend(std::shared_ptr<remote_backend> gpu, std::vector<int64_t> kill_after)
      : state_(std::make_shared<state>()) {
    state_->gpu = std::move(gpu);
    state_->kill_after = std::move(kill_after);
  }
  backends::backend_info info() const override { return state_->gpu->info(); }
  int64_t outstanding_tokens() const override { return state_->gpu->outstanding_tokens(); }
  bool healthy() const override { return state_->gpu->healthy(); }
  std::vector<backends::replica_status> replicas() const override { return state_->gpu->replicas(); }
  void submit(backends::batch_request request, std::function<void(backends::batch_result)> done) override {
    state_->gpu->submit(std::move(request), [s = state_, done = std::move(done)](backends::batch_result r) {
      const bool answered = r.st.ok();
      done(std::move(r));
      if (answered) s->on_answered();
    });
  }

 private:
  struct state {
    std::shared_ptr<remote_backend> gpu;
    std::vector<int64_t> kill_after;
    std::atomic<int64_t> answered{0};
    void on_answered() {
      const int64_t n = ++answered;
      for (int64_t at : kill_after) {
        if (at != n) continue;
        const pid_t pid = gpu->child_pid();
        if (pid <= 0) {
          TESSERA_LOG_ERROR("fault plan: kill_gpu after batch " << n << " of " << gpu->info().name
                                                                << ": its process is not running");
          continue;
        }
        TESSERA_LOG_WARN("fault plan: killing " << gpu->info().name << " (tessera-gpu, pid " << pid << ") after it "
                                                << "answered batch " << n);
        ::kill(pid, SIGKILL);
      }
    }
  };
  std::shared_ptr<state> state_;
};

}  // namespace

std::shared_ptr<backends::backend> with_gpu_faults(std::shared_ptr<remote_backend> gpu, int index,
                                         const exchange::fault_plan& host_plan) {
  std::vector<int64_t> kill_after;
  for (const auto& f : host_plan.faults)
    if (f.kind == fault_kind::kill_gpu && f.gpu == index) kill_after.push_back(f.batch);
  if (kill_after.empty()) return gpu;
  return std::make_shared<gpu_fault_backend>(std::move(gpu), std::move(kill_after));
}

std::string describe_tile_faults(const tile_group& g) {
  std::string out;
  for (const auto& t : g.tiles())
    out += (out.empty() ? "" : "; ") + ("tile " + std::to_string(t.id) + ": ") + exchange::describe_fault_counts(t.injected);
  return out;
}

}  // namespace tessera::host::app
