// tessera/host/tile_llm_backend.hpp: a decoder on tiles (tile_decoder) as llm_backends, the
// places the LLM serving engines (serving/llm: llm_engine, llm_router, the OpenAI API) run their
// steps.
//
// One backend per replica of the compiled decoder: each owns its replica's KV cache (one block
// space for its engine's scheduler) and runs that replica's steps, one at a time, on a worker
// thread of its own; replicas step at the same time. When a tile of a replica fails (a child exit
// or heartbeat silence reported by the tile group, or a step that fails with it), that replica's
// worker brings it back the way tile_backend's supervisor does (bring_back_tile: restart, shards,
// programs) and answers the step with kv_lost: the restored tile's part of the KV cache is empty,
// so the engine preempts every running sequence of the replica and recomputes it (and forgets its
// prefix cache), and every stream completes with the tokens it would have had. A tile that fails
// while its replica has no step is brought back at once, and the next step answers kv_lost. The
// other replicas go on.
// A decoder compiled for async scheduling (placement_request::feed_tokens; info().feeds) keeps up
// to two steps in flight on its tiles: step t+1 is sent as soon as the engine submits it, its ids
// that name a row of step t (-(j + 1)) checked against step t's rows sampled on the tiles. When a
// step fails, the one sent after it (which took its samples) is let finish and discarded; the
// failed step runs again alone as above and the next after it, or, when it cannot, the next is
// answered as it was (kv_lost, or a failure naming the step before).
//
//   auto replicas = tile_llm_backend::make(std::move(decoder), "tiles");   // tiles0, tiles1, ...
//   serving::llm_engine engine(cfg, (*replicas)[0], tokenizer, &metrics);
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/tile_decoder.hpp"

namespace tessera::host {

struct tile_llm_backend_config {
  /// How long a step waits for a failed tile to come back before it fails (peer_failed).
  std::chrono::milliseconds max_recovery{60000};
  /// Set (tessera-host --serve --trace): every step each replica runs is recorded there
  /// (tile_decoder::step_record: its mix and KV blocks per tile), up to max_traced_steps in all;
  /// later steps are counted, not recorded (a server runs for long).
  profiler* trace = nullptr;
  int64_t max_traced_steps = 20000;
};

class tile_llm_backend final : public backends::llm_backend {
 public:
  /// One backend per replica, named prefix + its index; they share the decoder.
  static result<std::vector<std::shared_ptr<tile_llm_backend>>> make(std::unique_ptr<tile_decoder> decoder,
                                                                     std::string prefix, tile_llm_backend_config cfg = {});
  ~tile_llm_backend() override;
  backends::llm_backend_info info() const override { return info_; }
  void submit(backends::step_batch batch, std::function<void(backends::step_result)> done) override;
  bool healthy() const override;
  /// A tile of the replica failed and is not back yet.
  bool recovering() const override;
  /// Answers queued steps with `cancelled` and ends the worker. Idempotent.
  void stop();
  tile_decoder& decoder() { return *dec_; }
  int replica() const { return replica_; }
  int64_t recoveries() const { return recoveries_.load(); }
  int64_t steps() const { return steps_.load(); }
  /// Async scheduling: steps sent to the tiles while the one before them ran.
  int64_t overlapped_steps() const { return overlapped_.load(); }
  /// Steps recorded in the trace (tile_llm_backend_config::trace), over all replicas sharing it.
  int64_t traced_steps() const;
  /// Supersteps and bytes exchanged between tiles, summed over the steps run.
  int64_t supersteps() const { return supersteps_.load(); }
  uint64_t bytes_exchanged() const { return bytes_.load(); }

 private:
  struct shared_decoder;  // the decoder, and the tile group's events passed to its replicas' backends
  tile_llm_backend(std::shared_ptr<shared_decoder> shared, int replica, std::string name, tile_llm_backend_config cfg);
  void on_tile_failed(const tile_event& ev);
  void trace(const backends::step_batch& batch, const tile_step_result& r, double start);
  void work();
  /// Async scheduling (info().feeds): up to two steps in flight on the replica's tiles.
  void work_pipelined();
  /// One step run to its end as the synchronous path does: again on a transient failure, the
  /// replica brought back and kv_lost when a tile failed (`lost`: one is known failed already).
  backends::step_result run_job(const backends::step_batch& batch, bool lost);
  void took_step(const backends::step_batch& batch, tile_step_result& r, double trace_start, backends::step_result& res);
  void recover_idle();
  backends::step_result stale_answer() const;
  std::vector<uint32_t> failed_tiles();
  /// Restarts and restores every failed tile of the replica; ok when all are back.
  status recover();
  struct job {
    backends::step_batch batch;
    std::function<void(backends::step_result)> done;
  };
  std::shared_ptr<shared_decoder> shared_;
  tile_decoder* dec_;
  int replica_;
  backends::llm_backend_info info_;
  tile_llm_backend_config cfg_;
  std::vector<uint32_t> tiles_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> jobs_;
  std::vector<uint32_t> lost_;  // tiles that failed since their shards were last restored
  bool kv_stale_ = false;       // brought back while idle: the next step answers kv_lost
  bool stopping_ = false;
  std::atomic<int64_t> recoveries_{0}, steps_{0}, supersteps_{0}, overlapped_{0};
  std::atomic<uint64_t> bytes_{0};
  std::thread worker_;
};

}  // namespace tessera::host
