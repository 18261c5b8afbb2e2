// tessera/serving/llm_scheduler.hpp: iteration-level (continuous) batching of decoder sequences,
// pure logic with no threads or clocks (llm_engine.hpp drives it against an llm_backend).
//
// Every step the scheduler forms one mixed batch under a token budget:
//   1. sequences already running, oldest first: a decode token each, or the next chunk of a
//      prefill (chunked prefill: a long prompt is cut to what the budget leaves);
//   2. then, when no one was preempted this step, waiting sequences oldest first, each admitted
//      only when the KV blocks of its whole remaining prompt are free (admission by free blocks);
//      on admission the longest cached prefix of its tokens is taken from the prefix cache.
// When a running sequence needs a block and the pool is dry, the newest running sequence not yet
// in this step is preempted by recompute: its blocks are freed, it goes back to the waiting queue
// with its tokens (prompt and output so far) and is prefilled again later; nothing is lost.
// Cancellation takes effect at the next schedule(): the sequence's blocks are freed.
// Static batching (batching_mode::static_batch) admits a batch of up to static_batch_size waiting
// sequences only when nothing runs, and admits nothing more until all of them have finished.
//
// The caller's loop (llm_engine.cpp does this):
//   llm_scheduler s(cfg, num_blocks, block_tokens);
//   s.add(id, prompt, max_new_tokens);
//   step_plan p = s.schedule();            // p.batch for the backend; p.cancelled to answer
//   ... run p.batch ...
//   s.step_done(p);                        // K/V of the scheduled tokens are now in the cache
//   for each sequence of p with logits: s.append(id, sampled) and, when it stops, s.finish(id)
// Async scheduling forms step t+1 while step t runs: step_done(p_t), speculate(id) for each
// sequence sampled in p_t, schedule() (their decode entries carry kPendingToken), and append()
// when p_t's tokens come back (a sequence that stopped meanwhile is finish()ed; its entry in step
// t+1 is ignored by step_done and the caller).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/serving/kv_block_manager.hpp"

namespace tessera::serving {

enum class batching_mode { continuous, static_batch };

struct scheduler_config {
  batching_mode mode = batching_mode::continuous;
  int32_t token_budget = 512;      ///< tokens per step (prefill chunks + decodes), >= 1
  int32_t max_running = 256;       ///< sequences holding KV blocks at once
  int32_t static_batch_size = 16;  ///< static mode: sequences admitted together
  bool prefix_caching = true;
};

struct step_plan {
  backends::step_batch batch;
  std::vector<uint64_t> cancelled;  ///< sequences dropped at this step (blocks freed)
  int32_t preempted = 0;            ///< sequences preempted to make room at this step
  int32_t prefill_tokens = 0, decode_tokens = 0;
  bool empty() const { return batch.seqs.empty(); }
};

struct scheduler_stats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  ///< prompt tokens taken from the prefix cache
  int64_t prefill_tokens = 0;     ///< tokens computed as prefill (recompute included)
  int64_t decode_tokens = 0;
};

class llm_scheduler {
 public:
  llm_scheduler(scheduler_config cfg, int32_t num_blocks, int32_t block_tokens);

  /// Queues a sequence that will produce up to `max_new_tokens` tokens. invalid_argument when it
  /// could not fit the KV cache even alone, or for an empty prompt or a taken id.
  /// score_prompt: the prompt is computed one position per step with logits at each (every
  /// prompt position's logits row, for its tokens' log-probabilities; no prefix-cache hit), and
  /// max_new_tokens may be 0 (scoring only: the caller finishes it after the last row).
  status add(uint64_t id, std::vector<int32_t> prompt, int32_t max_new_tokens, bool score_prompt = false);
  /// Right after step_done() gave `parent` the logits of its last prompt position, before its
  /// append(): a new running sequence `child` with the parent's prompt and `first_token`, sharing
  /// the parent's full prompt blocks (reference-counted; the child computes only the prompt's
  /// partial last block and its token). invalid_argument for an unknown parent, a taken id, or a
  /// parent that is not there.
  status fork(uint64_t parent, uint64_t child, int32_t first_token, int32_t max_new_tokens);
  /// Drops the sequence at the next schedule() (no-op for an unknown or finished one).
  void cancel(uint64_t id);
  /// The next step (empty when nothing can run).
  step_plan schedule();
  /// The plan's tokens are computed: sequences advance, full blocks enter the prefix cache.
  void step_done(const step_plan& plan);
  /// A token sampled for a sequence that got logits in the last step.
  void append(uint64_t id, int32_t token);
  /// The sequence has stopped: its blocks are freed and it is forgotten.
  void finish(uint64_t id);

  /// Async scheduling (llm_engine_config::async_scheduling): after step_done() of a step still
  /// running, for a sequence that got logits there, before its token is known: its tokens take a
  /// placeholder (kPendingToken) so that the next schedule() gives it its next decode position
  /// (the caller names the token there, e.g. the row it is sampled in), and append() puts the token
  /// in the placeholder's place. false when the token is its last (max_new_tokens): it is not
  /// scheduled again and stays awaiting its append().
  bool speculate(uint64_t id);
  /// The sequence's last token is a placeholder append() has not filled yet.
  bool pending(uint64_t id) const;
  /// The step that was to give the placeholders' tokens failed: every placeholder is dropped and no
  /// sequence awaits a token (call lose_kv() next: what ran is computed again).
  void unspeculate();
  static constexpr int32_t kPendingToken = -1;
  /// The backend lost its KV cache (step_result::kv_lost): every running sequence is preempted by
  /// recompute (prompt and the tokens generated so far are prefilled again) and the prefix cache
  /// is forgotten. Nothing is lost.
  void lose_kv();

  /// The sequence's tokens (prompt then output), empty for an unknown one.
  const std::vector<int32_t>& tokens(uint64_t id) const;
  int32_t prompt_length(uint64_t id) const;
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  const kv_block_manager& blocks() const { return blocks_; }
  const scheduler_stats& stats() const { return stats_; }
  const scheduler_config& config() const { return cfg_; }
  /// Invariants (blocks, queues, computed positions): empty string, else what is wrong (tests).
  std::string check() const;

 private:
  struct sequence {
    uint64_t id = 0;
    uint64_t order = 0;  // arrival order: older first in both queues
    std::vector<int32_t> tokens;
    int32_t prompt_length = 0;
    int32_t max_new = 0;
    int32_t computed = 0;  // positions whose K/V are in the cache
    bool running = false;
    bool cancelled = false;
    bool awaiting_token = false;  // got logits in the last step, append() not called yet
    bool finishing = false;       // speculate(): its awaited token is its last; not scheduled again
    int32_t pending_at = -1;      // speculate(): the placeholder's index in tokens
    int32_t score_until = 0;      // positions below it are computed one per step, with logits
  };
  void preempt(sequence& s);
  void insert_waiting(uint64_t id);
  void drop(uint64_t id);

  scheduler_config cfg_;
  kv_block_manager blocks_;
  std::map<uint64_t, sequence> seqs_;
  std::deque<uint64_t> waiting_;   // by arrival order
  std::vector<uint64_t> running_;  // by arrival order
  uint64_t next_order_ = 0;
  scheduler_stats stats_;
};

}  // namespace tessera::serving
