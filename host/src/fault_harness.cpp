#include "tessera/host/fault_harness.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <cmath>
#include <condition_variable>
#include <thread>

#include "tessera/host/tile_backend.hpp"
#include "tessera/models/forward.hpp"

namespace tessera::host {

using steady = std::chrono::steady_clock;

namespace {

// The tiles' counters are per incarnation (a restarted tile starts from zero), so the latest
// report of each (tile, incarnation) is kept and the sum taken at the end.
class tile_counter_tally {
 public:
  void sample(const tile_group& g) {
    for (const auto& t : g.tiles()) {
      auto& seen = latest_[{t.id, t.incarnation}];
      for (size_t k = 0; k < seen.injected.size(); ++k) seen.injected[k] = std::max(seen.injected[k], t.injected[k]);
      seen.stale = std::max(seen.stale, t.stale_messages);
    }
  }
  void total(fault_outcome& out) const {
    out.injected = {};
    out.stale_messages = 0;
    for (const auto& [key, seen] : latest_) {
      for (size_t k = 0; k < out.injected.size(); ++k) out.injected[k] += seen.injected[k];
      out.stale_messages += seen.stale;
    }
  }

 private:
  struct counters {
    exchange::fault_counts injected{};
    uint64_t stale = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, counters> latest_;
};

}  // namespace

result<fault_outcome> run_fault_scenario(const fault_scenario& s) {
  if (!s.plan_json.empty()) {
    auto plan = exchange::load_fault_plan(s.plan_json);
    if (!plan) return plan.error();
    if (auto host_side = plan->host_side(); !host_side.empty())
      return status::invalid("fault kind " + std::string(exchange::fault_kind_name(host_side.faults[0].kind)) +
                             " needs a tessera-gpu process spawned by tessera-host (--spawn-gpu, --faults); the "
                             "fault harness runs tiles only");
    TESSERA_RETURN_IF_ERROR(plan->check_tiles(s.tiles));
  }
  auto model = models::load_model(s.model, 3);
  if (!model) return model.error();
  placement_request req;
  req.tiles = s.tiles;
  req.tile_memory = 256 << 20;
  req.token_budget = std::max(512, model->config.max_position_embeddings);
  req.max_sequences = s.per_batch;
  req.forced = s.layout;
  tile_group_config g;
  g.heartbeat_interval = std::chrono::milliseconds(100);
  g.heartbeat_timeout = s.heartbeat_timeout;
  g.exchange_timeout = s.exchange_timeout;
  g.run_timeout = std::chrono::seconds(30);
  if (!s.plan_json.empty()) g.extra_tile_args = {"--faults", s.plan_json};
  auto deployed = deploy_bert(*model, req, g);
  if (!deployed.ok()) return deployed.error();
  auto group = std::move(deployed->group);
  auto backend = std::make_shared<tile_backend>(std::move(deployed->model), "tiles", tile_backend_config{.max_attempts = s.max_attempts});

  // Short requests (8-64 tokens) and their fault-free answers.
  auto lengths = models::seed_workload(s.requests, 0.0, 5);
  auto all = models::synthetic_batch(lengths, model->config.vocab_size, 9);
  auto want = models::reference_forward(*model, all);
  const int labels = model->config.num_labels;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> answers(static_cast<size_t>(s.requests), 0);
  std::vector<double> latency;
  fault_outcome out;
  out.requests = s.requests;
  double wall_sum = 0;
  int batches = 0, pending = 0;
  const auto t0 = steady::now();
  std::thread fault_thread;
  if (s.during) fault_thread = std::thread([&] { s.during(*group); });
  tile_counter_tally tally;
  std::atomic<bool> load_over{false};
  std::thread sampler([&] {
    while (!load_over) {
      tally.sample(*group);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (int first = 0; first < s.requests; first += s.per_batch) {
    const int count = std::min(s.per_batch, s.requests - first);
    backends::batch_request b;
    b.batch_id = static_cast<uint64_t>(first / s.per_batch + 1);
    for (int i = first; i < first + count; ++i) {
      backends::sequence_input q;
      q.token_ids.assign(all.token_ids.begin() + all.seq_offsets[i], all.token_ids.begin() + all.seq_offsets[i + 1]);
      b.sequences.push_back(std::move(q));
    }
    {
      std::lock_guard lk(mu);
      ++pending;
    }
    const auto submitted = steady::now();
    backend->submit(std::move(b), [&, first, count, submitted](backends::batch_result r) {
      std::lock_guard lk(mu);
      --pending;
      ++batches;
      wall_sum += r.timing.wall_seconds;
      const double lat = std::chrono::duration<double>(steady::now() - submitted).count();
      for (int i = first; i < first + count; ++i) {
        latency.push_back(lat);
        if (++answers[static_cast<size_t>(i)] > 1) ++out.duplicates;
        if (!r.st.ok()) {
          ++out.errors;
          continue;
        }
        double d = 0;
        for (int k = 0; k < labels; ++k)
          d = std::max(d, double(std::abs(r.logits[static_cast<size_t>((i - first) * labels + k)] -
                                          want[static_cast<size_t>(i * labels + k)])));
        if (d > 1e-4) ++out.wrong;
      }
      cv.notify_all();
    });
  }
  bool drained;
  {
    std::unique_lock lk(mu);
    drained = cv.wait_for(lk, std::chrono::seconds(300), [&] { return pending == 0; });
  }
  if (fault_thread.joinable()) fault_thread.join();
  std::this_thread::sleep_for(2 * g.heartbeat_interval);  // the last heartbeats carry the last counts
  load_over = true;
  sampler.join();
  tally.sample(*group);
  tally.total(out);
  backend->stop();  // answers anything still queued (cancelled), so nothing is left unanswered
  if (!drained) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::seconds(30), [&] { return pending == 0; });
  }
  out.seconds = std::chrono::duration<double>(steady::now() - t0).count();
  std::lock_guard lk(mu);
  for (int a : answers) out.answered += a > 0;
  out.recoveries = backend->recoveries();
  out.retries = backend->retries();
  out.last_recovery_seconds = backend->last_recovery_seconds();
  out.mean_batch_wall_seconds = batches ? wall_sum / batches : 0;
  if (!latency.empty()) {
    std::sort(latency.begin(), latency.end());
    out.p99_latency_seconds = latency[std::min(latency.size() - 1, static_cast<size_t>(0.99 * latency.size()))];
  }
  return out;
}

}  // namespace tessera::host
