// tessera/experiment/virtual_run.hpp: serving on MODELLED time. A discrete-event loop replays a
// trace through the real serving stack (router -> batcher -> batching policy) on a
// serving::manual_clock that it advances from event to event:
//   * arrivals at the trace's times are submitted to the router;
//   * each backend is a virtual_backend: busy for the modelled time of every batch on its
//     preset (device_model), serving its batches one after another; a batch's completion is an
//     event at start + modelled time, and only then does the batcher see the answer;
//   * the batchers' wake-up times (max queue delay, max age) are events too.
// Every formed batch can also be computed for real by a backends::backend (reference engine, or a
// tile group): the loop waits for it (wall clock passes, modelled time does not) and the logits
// are checked against models::reference_forward. Without one (timing-only), answers carry zero
// logits; the modelled results are the same, bit for bit (integer nanoseconds throughout).
//
//   virtual_run_config cfg;
//   cfg.shape = *models::shape_preset("bert-base");
//   cfg.backends.push_back({.name = "gpu0", .preset = "a100-40gb",
//                           .batching = {.kind = serving::policy_kind::static_padded}});
//   auto r = run_virtual(poisson_trace({.requests = 500, .rate = 300}), cfg);
//   std::cout << r->summary.throughput_rps << " req/s, p99 " << r->summary.p99_latency_s << " s\n";
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/experiment/device_model.hpp"
#include "tessera/experiment/trace.hpp"
#include "tessera/models/model.hpp"
#include "tessera/serving/batching_policy.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/timing/bert_ops.hpp"

namespace tessera::experiment {

/// Modelled service time of one batch: lengths (dummy rows included), layout, padded length.
using service_time_fn = std::function<result<double>(const std::vector<int32_t>&, backends::batch_layout, int32_t)>;

struct virtual_backend_spec {
  std::string name;     ///< "gpu0", "tiles0"
  std::string kind;     ///< "gpu" | "tiles" (routing); empty: the device's kind
  std::string preset;   ///< timing preset ("a100-40gb", "ipu-mk2", ...) unless `service` is set
  timing::ipu_mapping mapping;
  serving::batching_config batching;
  int32_t max_sequence_length = 512;
  /// Optional: computes each batch for real (timing-only when null).
  std::shared_ptr<backends::backend> compute;
  /// Optional: replaces the preset's timing model (tests: constant service times).
  service_time_fn service;
};

struct virtual_run_config {
  models::model_shape shape;                  ///< the modelled network
  timing::dtype dtype = timing::dtype::fp16;
  std::vector<virtual_backend_spec> backends;
  serving::routing_config routing;
  /// Token ids of the computed requests come from models::synthetic_batch with this vocab.
  int32_t vocab_size = 30522;
  uint64_t input_seed = 1;
  /// When set (and backends compute), every answer is checked against the reference forward.
  std::shared_ptr<const models::bert_model> check_model;
  /// What the computing backends compute in: the error is measured as logit_error says.
  models::dtype computed_in = models::dtype::fp32;
};

/// How far a computed answer's logits are from the fp32 reference's: max |got - want|; for a bf16
/// computation that divided by max(1, max |want|), the scale of bf16's bound (docs/models.md,
/// "bf16"). Infinity when the sizes differ.
double logit_error(const std::vector<float>& want, const std::vector<float>& got, models::dtype computed_in);
/// The most logit_error may be: 1e-4 for fp32 (the same sums in another order), 0.05 for bf16.
double logit_tolerance_of(models::dtype computed_in);

struct request_record {
  uint64_t id = 0;
  int32_t length = 0;
  double arrival_s = 0, dispatch_s = 0, done_s = 0;  ///< modelled, from the run's start
  std::string backend;
  bool ok = false;
  std::string error;
  double latency_s() const { return done_s - arrival_s; }
};

struct batch_record {
  std::string backend;
  double start_s = 0, end_s = 0;  ///< modelled
  double wall_s = 0;              ///< real computation (0 in timing-only runs)
  int32_t sequences = 0;          ///< real sequences
  int32_t rows = 0;               ///< sequences incl. dummy rows
  int64_t real_tokens = 0, computed_tokens = 0;
};

struct run_summary {
  int64_t requests = 0, completed = 0, failed = 0;
  double makespan_s = 0;        ///< modelled: first arrival -> last completion
  double throughput_rps = 0;    ///< completed / makespan (modelled)
  double mean_latency_s = 0, p50_latency_s = 0, p99_latency_s = 0;  ///< modelled
  int64_t batches = 0;
  double mean_batch_sequences = 0;
  double padding_share = 0;     ///< computed tokens that are padding
  std::vector<double> busy_share;  ///< per backend: modelled busy time / makespan
  bool computed = false;        ///< every batch computed for real
  double wall_s = 0;            ///< wall clock of the whole run
  double compute_wall_s = 0;    ///< sum of the real batches' wall time
  double wall_rps = 0;          ///< completed / wall_s (real computation)
  int64_t checked = 0;          ///< answers compared with the reference forward
  double max_abs_logit_error = 0;
  /// Per backend name: answers it computed that were checked, and their max |logit error|.
  struct backend_check {
    int64_t checked = 0;
    double max_abs_logit_error = 0;
  };
  std::map<std::string, backend_check> checks;
};

struct run_result {
  std::vector<request_record> requests;
  std::vector<batch_record> batches;
  run_summary summary;
};

/// Replays `t` on the virtual clock through the backends of `cfg`. Fails on a configuration
/// error or a timing-model error; a request that the stack refuses or fails is recorded.
result<run_result> run_virtual(const trace& t, const virtual_run_config& cfg);

/// The q-quantile (0..1) of `v` by nearest rank (v is copied and sorted).
double quantile(std::vector<double> v, double q);

}  // namespace tessera::experiment
