// tessera/serving/llm_engine.hpp: runs the continuous-batching scheduler (llm_scheduler.hpp)
// against an llm_backend on a thread of its own: every step it takes new requests and
// cancellations in, forms a mixed batch, runs it, samples each sequence that got logits, streams
// the new text (through the tokenizer's token_stream, so no UTF-8 character is split) and stops
// sequences on stop token ids, EOS, stop strings (matched on text) or max_tokens. A token that does
// not end its sequence has its text decoded, matched and sent while the next step runs (a stop
// string found then drops the sequence from that step's answer). It records the
// LLM metrics (TTFT, inter-token latency, e2e, queue time, tokens, KV blocks, preemptions,
// prefix-cache hits) in serving_metrics::llm, and, when the backend models a device's time
// (step_result::modelled_seconds), TTFT, inter-token and end-to-end latency on that clock too.
//
//   llm_engine e({}, backend, tokenizer, &metrics);
//   e.start();
//   auto id = e.submit({.prompt = ids, .max_tokens = 32, .on_event = [](llm_event ev) {...}});
//   e.cancel(*id);          // a client gone: blocks freed at the next step
//   e.stop();               // unfinished requests end with finish_reason "cancelled"
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/serving/llm_scheduler.hpp"
#include "tessera/serving/llm_tokenizer.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/sampling.hpp"

namespace tessera::serving {

/// Something a request produced. The last event has `finished` set.
struct llm_event {
  int32_t index = 0;            ///< the choice (0..n-1) this event is of; each choice ends with its own
  std::string text;             ///< new text (may be empty while a character or stop is pending)
  std::vector<int32_t> tokens;  ///< new token ids
  /// With llm_request::logprobs >= 0: one per token of `tokens`, from the raw logits.
  std::vector<token_logprob> logprobs;
  /// With llm_request::prompt_logprobs: on the choice's first event, one per prompt token (the
  /// first has none: NaN), from the raw logits of the positions before it.
  std::vector<token_logprob> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;    ///< "stop", "length", "cancelled" or "error" (with `error`)
  status error;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

struct llm_request {
  std::vector<int32_t> prompt;
  /// >= 1; 0 only with prompt_logprobs (scoring: the prompt's log-probabilities, no token).
  int32_t max_tokens = 16;
  /// Choices sampled from one prefill: choice 0 runs the prompt, the others fork from it when its
  /// last position's logits arrive (their first token is drawn from those logits) and share its
  /// full prompt KV blocks. With a seed, choice i samples with seed + i (mod 2^64), so choice i
  /// equals a lone request with that seed.
  int32_t n = 1;
  /// -1: none; else each sampled token's log-probability and this many most likely alternatives
  /// (also the alternatives of prompt_logprobs).
  int32_t logprobs = -1;
  /// Every prompt token's log-probability (echo); the prompt is then computed one position per
  /// step and taken from no prefix cache.
  bool prompt_logprobs = false;
  sampling_params sampling;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  ///< stop strings, matched on the output text
  bool ignore_eos = false;        ///< else the tokenizer's EOS stops the sequence
  /// Called on the engine's thread, in order; must not block.
  std::function<void(llm_event)> on_event;
};

struct llm_engine_config {
  scheduler_config scheduler;
  size_t max_queued = 4096;  ///< requests waiting or running; more are refused (overloaded)
  /// A backend that samples where the LM head is (llm_backend_info::samples, the tiles) gets each
  /// generating row's sampling and sends back its token and log-probabilities, not its logits
  /// row; the tokens are the same either way (same code, same draw). false: always the logits.
  bool sample_on_backend = true;
  /// Async scheduling (--async-scheduling on; a backend with llm_backend_info::feeds, the tiles
  /// compiled for it): while step t runs, step t+1 is formed and sent, its decode tokens named by
  /// their rows in step t's samples (the backend takes them there), so the backend never waits
  /// for this thread's bookkeeping of step t (sampling results, stop checks, streaming). A
  /// sequence that ends at step t (EOS, stop string, max_tokens, cancelled) has its step t+1 row
  /// ignored: nothing of it is streamed or counted, its blocks are freed. New requests join the
  /// next step formed. Steps whose tokens are sampled here (logits rows: n > 1 before the fork,
  /// prompt scoring) or that need the history (penalties) are formed after step t's answer, as
  /// without. Outputs are the same either way (greedy and seeded sampling alike).
  bool async_scheduling = false;
  /// When set, one CSV line per step goes to this file (llm_step_record's fields; --llm-step-log).
  std::string step_log;
  /// When set, one CSV line per finished request (tokens, finish reason, TTFT and end-to-end on
  /// the wall clock and on the modelled clock; --llm-request-log).
  std::string request_log;
};

/// What one step was made of and where its time went (the engine's step log).
struct llm_step_record {
  int64_t step = 0;
  double start_s = 0;        ///< since the engine started
  double schedule_ms = 0;    ///< forming the batch
  double backend_ms = 0;     ///< submit to answer (the engine streams the last step's text meanwhile)
  double compute_ms = 0;     ///< the backend's busiest place computing (0: not reported)
  double modelled_ms = 0;    ///< the step on the emulated device's clock (0: no timing model)
  double post_ms = 0;        ///< sampling, and the text of sequences that end at this step
  double stream_ms = 0;      ///< the last step's text and events, sent while this step ran
  int32_t seqs = 0, prefill_seqs = 0, prefill_tokens = 0, decode_tokens = 0, logits = 0;
  int32_t running = 0, waiting = 0, preempted = 0;
  int32_t kv_used = 0, kv_free = 0, kv_cached = 0;
  static const char* csv_header();
  std::string csv() const;
};

/// What the OpenAI routes need of the place their requests go: one llm_engine, or an llm_router
/// (llm_router.hpp) over the engines of several replicas.
class llm_endpoint {
 public:
  virtual ~llm_endpoint() = default;
  /// Queues a request; the id is for cancel(). Errors as llm_engine::submit's.
  virtual result<uint64_t> submit(llm_request r) = 0;
  /// Stops a request at its replica's next step (no-op for an unknown or finished one).
  virtual void cancel(uint64_t id) = 0;
  virtual bool healthy() const = 0;
  /// Largest prompt + max_tokens a request may ask for.
  virtual int64_t max_context() const = 0;
  /// Per-replica gauges for /metrics (an llm_router's; none for a lone engine).
  virtual std::vector<gauge_sample> gauges() const { return {}; }
  /// Per-replica facts for /info (an llm_router's; null for a lone engine).
  virtual nlohmann::json describe() const { return nullptr; }
};

/// An engine's load now: its KV blocks and the prompt tokens of requests it has not started.
struct llm_load {
  int32_t kv_total = 0, kv_used = 0, kv_free = 0, kv_cached = 0;
  int64_t running = 0, waiting = 0;
  /// Prompt tokens of the requests submitted and not yet scheduled (their blocks are not taken).
  int64_t queued_tokens = 0;
};

class llm_engine final : public llm_endpoint {
  using clock_type_point = std::chrono::steady_clock::time_point;

 public:
  llm_engine(llm_engine_config cfg, std::shared_ptr<backends::llm_backend> backend,
             std::shared_ptr<const llm_tokenizer> tokenizer, serving_metrics* metrics);
  ~llm_engine();
  llm_engine(const llm_engine&) = delete;
  llm_engine& operator=(const llm_engine&) = delete;

  void start();
  /// Ends the thread; unfinished requests get a "cancelled" event. Idempotent.
  void stop();
  /// Queues a request. invalid_argument (with what to change) for a prompt that is empty, has a
  /// token out of the vocabulary, or with max_tokens does not fit the model's positions or the
  /// KV cache; overloaded when max_queued requests are in; cancelled after stop().
  result<uint64_t> submit(llm_request r) override;
  /// Stops a request at the next step (no-op for an unknown or finished one); its last event is
  /// finish_reason "cancelled".
  void cancel(uint64_t id) override;

  const backends::llm_backend_info& backend_info() const { return info_; }
  const llm_engine_config& config() const { return cfg_; }
  bool healthy() const override;
  /// The backend is bringing a failed part back (llm_backend::recovering).
  bool recovering() const { return backend_->recovering(); }
  /// Largest prompt + max_tokens a request may ask for.
  int64_t max_context() const override;
  /// The KV blocks and queued prompt tokens now (any thread; set after every schedule and step).
  llm_load load() const;
  /// Async scheduling: steps formed and sent while the step before them ran (any thread).
  int64_t steps_formed_ahead() const { return formed_ahead_.load(); }

 private:
  struct live;
  void run();
  void emit(live& l, llm_event ev, bool last);
  void finish(live& l, std::string reason, status error = {});
  void update_gauges();
  /// A sampled token's text, event and stop strings; finishes the request when it stops (true).
  bool deliver(uint64_t id, int32_t token, bool stop_token, token_logprob lp);
  /// Draws the next token of `l` from a logits row (penalties and bias on a copy), with its
  /// log-probability when asked.
  int32_t sample(live& l, const std::vector<float>& logits, token_logprob& lp);
  /// With a backend that samples: each row that yields a sequence's next token carries its
  /// sampling parameters and the uniform drawn for it (the others keep their logits).
  void attach_sampling(backends::step_batch& batch);
  /// A token sampled for `l`: metrics, stop checks, delivered now or deferred.
  void took(live& l, int32_t token, token_logprob lp, clock_type_point after, double modelled_step);
  void flush_deferred();
  // The engine thread's loop (run) in parts: a step sent and not yet answered (flight), the
  // requests and cancellations taken in (false: stopping), async scheduling's step t+1 formed
  // while step t runs (speculate), a step formed and sent (form; false: nothing to send), and an
  // answer taken in (answered).
  struct flight;
  bool intake(bool wait);
  void speculate(flight& f);
  bool form(std::deque<flight>& flights);
  void answered(flight& f, backends::step_result r, std::deque<flight>& flights, clock_type_point t0,
                scheduler_stats& last, int64_t& last_queries);

  llm_engine_config cfg_;
  std::shared_ptr<backends::llm_backend> backend_;
  std::shared_ptr<const llm_tokenizer> tokenizer_;
  serving_metrics* metrics_;
  serving_metrics own_metrics_;  // when none is given
  backends::llm_backend_info info_;
  bool async_ = false;  // async_scheduling on a backend that feeds (info_.feeds)
  std::atomic<int64_t> formed_ahead_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, std::unique_ptr<live>>> inbox_;
  std::vector<uint64_t> cancels_;
  size_t in_flight_ = 0;  // submitted, not finished
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;

  // Engine thread only.
  std::unique_ptr<llm_scheduler> scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<live>> live_;
  std::deque<std::pair<double, uint64_t>> rate_window_;  // (seconds, generated tokens so far)
  std::unique_ptr<std::ofstream> step_log_, request_log_;
  // The backend's modelled clock (step_result::modelled_seconds summed; 0 without a timing
  // model): a request's arrival is stamped with it when the engine takes the request in.
  double modelled_now_ = 0;
  struct deferred_token {
    uint64_t id;
    int32_t token;
    token_logprob lp;
  };
  std::vector<deferred_token> deferred_;  // sampled tokens whose text is not out yet
  // load(): this engine's gauges. The metrics' gauges are sums over the engines sharing them:
  // each engine adds the change of its own values.
  std::atomic<int64_t> kv_used_{0}, kv_free_{0}, kv_cached_{0}, running_{0}, waiting_{0}, queued_tokens_{0};
  double tokens_per_second_ = 0;
  uint64_t generated_ = 0;  // tokens this engine generated (its share of the tokens/s gauge)
};

}  // namespace tessera::serving
