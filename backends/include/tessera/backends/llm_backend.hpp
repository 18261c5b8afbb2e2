// tessera/backends/llm_backend.hpp: what the LLM serving side (the continuous-batching
// scheduler, serving/llm/llm_engine.hpp) sees of a place that runs decoder steps: its paged KV
// layout and an asynchronous step. A step is a MIXED batch: prefill chunks of some sequences and
// single decode tokens of others, each with the block table of its paged KV cache; the answer is
// the logits of the last token of every sequence that asked for them, in batch order.
//
// The backend owns the K/V storage (one paged cache per place that runs the layers); the caller
// owns the block ids (a block manager over the same number of blocks) and never asks for a
// position whose earlier K/V are not in the cache. Implementations: the in-process reference
// (step_fn_backend over models' decoder step, llm_reference_backend.hpp), later tile groups and
// the GPU process.
//
//   llm_backend& b = ...;
//   step_batch batch{{{.seq_id = 1, .tokens = {1, 15, 27}, .start_pos = 0, .block_table = {4}}}};
//   b.submit(std::move(batch), [](step_result r) { if (r.st) use(r.logits[0]); });
#pragma once

#include <atomic>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/common/job_queue.hpp"

namespace tessera::backends {

/// One sequence's part of a step (its new tokens at start_pos.., its block table) and a mixed
/// batch of them: the decoder contract's types (models/decoder.hpp).
using seq_step = models::seq_step;
using step_batch = models::step_batch;

/// The answer to one step: logits [vocab] per sequence with want_logits, in batch order. A
/// backend that samples (llm_backend_info::samples) answers a row whose seq_step carried sample
/// parameters in `samples` (same row index: token, its log-probability and the alternatives asked
/// for) and leaves that row's logits empty; samples[i].token < 0 (or no samples): row i's logits.
struct step_result {
  status st;
  std::vector<std::vector<float>> logits;
  std::vector<models::token_logprob> samples;
  double wall_seconds = 0;      ///< measured on the backend
  double modelled_seconds = 0;  ///< the emulated hardware's time (0: no timing model)
  double compute_seconds = 0;   ///< compute of the busiest place that ran it (tiles: the busiest tile), 0: unknown
  /// With a failed `st`: the backend lost its KV cache (a tile failed and came back empty). The
  /// step was not run; the engine preempts every running sequence to recompute it and forgets its
  /// prefix cache, and nothing fails.
  bool kv_lost = false;
};

/// Static facts of a decoder backend.
struct llm_backend_info {
  std::string name = "llm0";
  std::string kind = "reference";
  int32_t block_tokens = 16;     ///< positions per KV block
  int32_t num_blocks = 0;        ///< KV blocks of the backend's cache
  int32_t vocab_size = 0;
  int32_t max_positions = 0;     ///< positions a sequence may reach (max_position_embeddings)
  /// Samples rows where the LM head is: seq_step::sample is answered in step_result::samples.
  bool samples = false;
  /// Async scheduling: a step may be submitted before the previous one is answered, and a token
  /// id -(j + 1) in it is the token the previous step sampled where the LM head is (its logits row
  /// j, which carried sample parameters). Steps are answered in the order submitted; when one
  /// fails, the step submitted after it is answered with a failure as well (kv_lost when it was).
  bool feeds = false;
};

class llm_backend {
 public:
  virtual ~llm_backend() = default;
  virtual llm_backend_info info() const = 0;
  /// Queues a step. `done` is called exactly once (also on failure or shutdown), on any thread.
  virtual void submit(step_batch batch, std::function<void(step_result)> done) = 0;
  virtual bool healthy() const { return true; }
  /// Healthy, but bringing a failed part back (steps wait for it): a router prefers others.
  virtual bool recovering() const { return false; }
};

/// Runs one step synchronously (the backend's worker thread calls it, one step at a time).
using step_fn = std::function<result<std::vector<std::vector<float>>>(const step_batch&)>;

/// An llm_backend in this process: a queue and one worker thread running `step` on each batch
/// in order (K/V state lives in whatever `step` captures, so steps never overlap).
class step_fn_backend : public llm_backend {
 public:
  step_fn_backend(llm_backend_info info, step_fn step);
  ~step_fn_backend() override;
  llm_backend_info info() const override { return info_; }
  void submit(step_batch batch, std::function<void(step_result)> done) override;
  /// Answers queued steps with `cancelled` and ends the worker. Idempotent.
  void stop();
  int64_t steps_run() const;

 private:
  void work();
  struct job {
    step_batch batch;
    std::function<void(step_result)> done;
  };
  llm_backend_info info_;
  step_fn step_;
  job_queue<job> jobs_;
  std::atomic<int64_t> steps_run_{0};
  std::thread worker_;
};

}  // namespace tessera::backends
