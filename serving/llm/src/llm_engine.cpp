// The engine loop around the continuous-batching scheduler. See llm_engine.hpp.
#include "tessera/serving/llm_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <deque>
#include <optional>

#include "tessera/common/check.hpp"
#include "tessera/common/log.hpp"

namespace tessera::serving {

namespace {
using clock_type = std::chrono::steady_clock;
double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

const char* llm_step_record::csv_header() {
  return "step,start_s,schedule_ms,backend_ms,compute_ms,modelled_ms,post_ms,stream_ms,seqs,prefill_seqs,prefill_tokens,decode_tokens,logits,"
         "running,waiting,preempted,kv_used,kv_free,kv_cached";
}

std::string llm_step_record::csv() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%lld,%.6f,%.3f,%.3f,%.3f,%.4f,%.3f,%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d",
                static_cast<long long>(step), start_s, schedule_ms, backend_ms, compute_ms, modelled_ms, post_ms, stream_ms, seqs, prefill_seqs,
                prefill_tokens, decode_tokens, logits, running, waiting, preempted, kv_used, kv_free, kv_cached);
  return buf;
}

struct llm_engine::live {
  uint64_t id = 0;
  llm_request req;
  sampler smp;
  std::unique_ptr<token_stream> text_stream;
  stop_text stops;
  int32_t prompt_tokens = 0;
  int32_t generated = 0;
  clock_type::time_point arrival, last_token;
  clock_type::time_point first_token_at;
  double modelled_arrival = 0, modelled_last = 0, modelled_first = 0;  // on the modelled clock
  bool scheduled = false;
  bool first_token = true;
  bool done = false;
  int32_t index = 0;  // the choice
  // Choices 1..n-1 of a request, held by choice 0 until its first token's logits fork them.
  std::vector<std::unique_ptr<live>> pending;
  std::vector<token_logprob> prompt_lp;  // with req.prompt_logprobs: one per prompt token
  // The uniforms drawn for the next sampled tokens and not used yet, in order: a sampled token
  // takes exactly one draw wherever it is sampled. `sent` of them went with steps not answered
  // yet (two with async scheduling); a step that had no answer leaves its draw for the next one.
  std::deque<double> us;
  size_t sent = 0;
  double send_u() {  // the draw for the next step this sequence samples in
    while (us.size() <= sent) us.push_back(smp.draw());
    return us[sent++];
  }
  double take_u() {  // the oldest draw, used now (the token came back, or is sampled here)
    if (us.empty()) us.push_back(smp.draw());
    const double v = us.front();
    us.pop_front();
    sent = sent > 0 ? sent - 1 : 0;
    return v;
  }
  bool prompt_scored = false, prompt_sent = false;

  live(llm_request r, std::unique_ptr<token_stream> ts, int32_t choice = 0)
      : req(std::move(r)), smp(choice_sampling(req.sampling, choice)), text_stream(std::move(ts)), stops(req.stop),
        prompt_tokens(static_cast<int32_t>(req.prompt.size())), arrival(clock_type::now()), index(choice) {
    if (req.prompt_logprobs) {
      prompt_lp.resize(req.prompt.size());
      prompt_lp[0].token = req.prompt[0];
    }
  }
  static sampling_params choice_sampling(sampling_params p, int32_t choice) {
    if (p.seed) p.seed = *p.seed + static_cast<uint64_t>(choice);
    return p;
  }
};

llm_engine::llm_engine(llm_engine_config cfg, std::shared_ptr<backends::llm_backend> backend,
                       std::shared_ptr<const llm_tokenizer> tokenizer, serving_metrics* metrics)
    : cfg_(cfg), backend_(std::move(backend)), tokenizer_(std::move(tokenizer)),
      metrics_(metrics ? metrics : &own_metrics_), info_(backend_->info()) {
  async_ = cfg_.async_scheduling && info_.feeds && info_.samples && cfg_.sample_on_backend;
  if (cfg_.async_scheduling && !async_)
    TESSERA_LOG_WARN("LLM engine over " << info_.name << ": async scheduling needs a backend that takes a step's tokens "
                     "from the last step's samples (tiles compiled for it) and sampling on the backend; this one steps "
                     "synchronously");
  scheduler_ = std::make_unique<llm_scheduler>(cfg_.scheduler, info_.num_blocks, info_.block_tokens);
  if (!cfg_.request_log.empty()) {
    request_log_ = std::make_unique<std::ofstream>(cfg_.request_log, std::ios::trunc);
    if (*request_log_)
      *request_log_ << "id,prompt_tokens,completion_tokens,finish_reason,ttft_s,e2e_s,modelled_ttft_s,modelled_e2e_s\n";
    else
      TESSERA_LOG_ERROR("cannot write the LLM request log " << cfg_.request_log);
  }
  if (!cfg_.step_log.empty()) {
    step_log_ = std::make_unique<std::ofstream>(cfg_.step_log, std::ios::trunc);
    if (*step_log_)
      *step_log_ << llm_step_record::csv_header() << '\n';
    else
      TESSERA_LOG_ERROR("cannot write the LLM step log " << cfg_.step_log);
  }
}

llm_engine::~llm_engine() { stop(); }

void llm_engine::start() {
  std::lock_guard lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  metrics_->llm.enabled.store(true);
  update_gauges();
  thread_ = std::thread([this] { run(); });
}

void llm_engine::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What never reached the thread, and what it left.
  for (auto& [id, l] : inbox_) live_.emplace(id, std::move(l));
  inbox_.clear();
  for (auto& [id, l] : live_)
    if (!l->done) finish(*l, "cancelled", status(errc::cancelled, "the server is stopping"));
  live_.clear();
}

bool llm_engine::healthy() const { return backend_->healthy(); }

int64_t llm_engine::max_context() const {
  const int64_t cache = int64_t{info_.num_blocks} * info_.block_tokens;
  return info_.max_positions > 0 ? std::min<int64_t>(cache, info_.max_positions) : cache;
}

result<uint64_t> llm_engine::submit(llm_request r) {
  if (r.prompt.empty()) return status::invalid("the prompt has no tokens");
  if (r.max_tokens < (r.prompt_logprobs ? 0 : 1))
    return status::invalid(r.prompt_logprobs ? "max_tokens must be at least 0"
                                             : "max_tokens must be at least 1 (0 only to score the prompt: echo with logprobs)");
  if (r.n < 1) return status::invalid("n must be at least 1");
  if (r.logprobs > 20) return status::invalid("logprobs asks for " + std::to_string(r.logprobs) + " alternatives; at most 20");
  {
    // What neither sampler can use (a NaN temperature, top_p 0, ...), refused here by name.
    const auto& q = r.sampling;
    models::sample_params p{.temperature = q.temperature, .top_k = q.top_k, .top_p = q.top_p, .logprobs = -1,
                            .presence_penalty = q.presence_penalty, .frequency_penalty = q.frequency_penalty,
                            .repetition_penalty = q.repetition_penalty, .logit_bias = q.logit_bias};
    if (auto st = models::check_sample_params(p, info_.vocab_size); !st.ok()) return st;
  }
  for (const auto& [t, b] : r.sampling.logit_bias)
    if (t < 0 || t >= info_.vocab_size)
      return status::invalid("logit_bias names token id " + std::to_string(t) + ", outside the vocabulary (0.." +
                             std::to_string(info_.vocab_size - 1) + ")");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= info_.vocab_size)
      return status::invalid("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                             std::to_string(info_.vocab_size - 1) + ")");
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (need > max_context())
    return status::invalid("this model's maximum context length is " + std::to_string(max_context()) +
                           " tokens, but " + std::to_string(need) + " were requested (" +
                           std::to_string(r.prompt.size()) + " in the prompt, " +
                           std::to_string(r.max_tokens) + " for the completion); shorten the prompt "
                           "or lower max_tokens");
  if (r.n > 1) {
    // The choices' KV blocks at their longest: the shared full prompt blocks once, then each
    // choice's own (the prompt's partial last block and its tokens).
    const int64_t bt = info_.block_tokens, p = static_cast<int64_t>(r.prompt.size());
    const int64_t own = (p + r.max_tokens + bt - 1) / bt - p / bt;
    const int64_t blocks = p / bt + r.n * own;
    if (blocks > info_.num_blocks)
      return status::invalid("n = " + std::to_string(r.n) + " choices of up to " + std::to_string(r.max_tokens) +
                             " tokens after a " + std::to_string(p) + "-token prompt need " + std::to_string(blocks) +
                             " KV blocks of " + std::to_string(bt) + " positions; the cache holds " +
                             std::to_string(info_.num_blocks) + "; lower n or max_tokens");
  }
  const int32_t n = r.n;
  auto l = std::make_unique<live>(r, tokenizer_->stream());
  for (int32_t i = 1; i < n; ++i) {
    l->pending.push_back(std::make_unique<live>(r, tokenizer_->stream(), i));
    l->pending.back()->scheduled = true;  // never queued on its own
  }
  std::lock_guard lock(mu_);
  if (stopping_ || !started_) return status(errc::cancelled, "the server is stopping");
  if (in_flight_ + static_cast<size_t>(n) > cfg_.max_queued)
    return status(errc::overloaded, "the model's queue is full (" + std::to_string(cfg_.max_queued) +
                                        " requests); retry later");
  const uint64_t id = next_id_;
  next_id_ += static_cast<uint64_t>(n);  // the choices' ids: id .. id + n - 1
  l->id = id;
  for (int32_t i = 1; i < n; ++i) l->pending[static_cast<size_t>(i - 1)]->id = id + static_cast<uint64_t>(i);
  in_flight_ += static_cast<size_t>(n);
  queued_tokens_.fetch_add(l->prompt_tokens);
  inbox_.emplace_back(id, std::move(l));
  cv_.notify_one();
  return id;
}

void llm_engine::cancel(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

void llm_engine::emit(live& l, llm_event ev, bool last) {
  ev.finished = last;
  ev.index = l.index;
  if (l.prompt_scored && !l.prompt_sent) {
    ev.prompt_logprobs = l.prompt_lp;
    l.prompt_sent = true;
  }
  ev.prompt_tokens = l.prompt_tokens;
  ev.completion_tokens = l.generated;
  if (!l.req.on_event) return;
  try {
    l.req.on_event(std::move(ev));
  } catch (const std::exception& e) {
    TESSERA_LOG_ERROR("an LLM event handler threw: " << e.what());
  }
}

void llm_engine::finish(live& l, std::string reason, status error) {
  if (l.done) return;
  l.done = true;
  // Choices not forked yet end as choice 0 did (a scored prompt with max_tokens 0 ends them all).
  for (auto& p : l.pending) {
    if (l.prompt_scored) {
      p->prompt_lp = l.prompt_lp;
      p->prompt_scored = true;
    }
    finish(*p, reason, error);
  }
  l.pending.clear();
  if (!l.scheduled) queued_tokens_.fetch_sub(l.prompt_tokens);
  auto& m = metrics_->llm;
  m.finished.add(reason);
  const auto now = clock_type::now();
  if (reason == "stop" || reason == "length") {
    m.e2e_latency.observe(seconds_between(l.arrival, now));
    if (modelled_now_ > 0) m.modelled_e2e_latency.observe(modelled_now_ - l.modelled_arrival);
  }
  if (request_log_) {
    // id, tokens, how it ended, then wall-clock and modelled seconds (TTFT, e2e; -1: no first token).
    const bool first = !l.first_token;
    char buf[320];
    std::snprintf(buf, sizeof buf, "%llu,%d,%d,%s,%.6f,%.6f,%.6f,%.6f\n", static_cast<unsigned long long>(l.id),
                  l.prompt_tokens, l.generated, reason.c_str(), first ? seconds_between(l.arrival, l.first_token_at) : -1.0,
                  seconds_between(l.arrival, now), first ? l.modelled_first - l.modelled_arrival : -1.0,
                  modelled_now_ - l.modelled_arrival);
    *request_log_ << buf;
  }
  // The gauges follow the scheduler before the client hears the end: a client that reads /metrics
  // right after its last event sees its blocks released (CI caught the lag: 57 blocks still "used").
  update_gauges();
  llm_event ev;
  ev.finish_reason = std::move(reason);
  ev.error = std::move(error);
  emit(l, std::move(ev), true);
  std::lock_guard lock(mu_);
  --in_flight_;
}

void llm_engine::update_gauges() {
  auto& m = metrics_->llm;
  const auto& b = scheduler_->blocks();
  // Several engines (replicas) may share the metrics: each adds the change of its own value.
  auto set = [](std::atomic<int64_t>& mine, std::atomic<int64_t>& total, int64_t v) {
    total.fetch_add(v - mine.exchange(v));
  };
  set(kv_used_, m.kv_blocks_used, b.used_blocks());
  set(kv_free_, m.kv_blocks_free, b.free_blocks());
  set(kv_cached_, m.kv_blocks_cached, b.cached_blocks());
  set(running_, m.running, static_cast<int64_t>(scheduler_->running()));
  set(waiting_, m.waiting, static_cast<int64_t>(scheduler_->waiting()));
}

llm_load llm_engine::load() const {
  return {.kv_total = info_.num_blocks,
          .kv_used = static_cast<int32_t>(kv_used_.load()),
          .kv_free = static_cast<int32_t>(kv_free_.load()),
          .kv_cached = static_cast<int32_t>(kv_cached_.load()),
          .running = running_.load(),
          .waiting = waiting_.load(),
          .queued_tokens = queued_tokens_.load()};
}

bool llm_engine::deliver(uint64_t id, int32_t token, bool stop_token, token_logprob lp) {
  auto it = live_.find(id);
  if (it == live_.end()) return true;  // cancelled meanwhile
  live& l = *it->second;
  llm_event ev;
  ev.tokens = {token};
  if (l.req.logprobs >= 0) ev.logprobs.push_back(std::move(lp));
  std::string reason;
  if (stop_token) {
    reason = "stop";  // the stop token's text is not part of the output
  } else {
    ev.text = l.stops.push(l.text_stream->push(token));
    if (l.stops.stopped()) reason = "stop";
  }
  if (reason.empty() && l.generated >= l.req.max_tokens) reason = "length";
  if (!reason.empty() && !l.stops.stopped()) ev.text += l.stops.push(l.text_stream->flush()) + l.stops.flush();
  emit(l, std::move(ev), false);
  if (reason.empty()) return false;
  // A stop string found here may be on its way in the step just submitted: that step's K/V and
  // logits of it are dropped (step_done and the sampling loop skip a sequence they do not know).
  scheduler_->finish(l.id);
  finish(l, reason);
  live_.erase(it);
  return true;
}

void llm_engine::flush_deferred() {
  for (auto& d : deferred_) deliver(d.id, d.token, false, std::move(d.lp));
  deferred_.clear();
}

int32_t llm_engine::sample(live& l, const std::vector<float>& logits, token_logprob& lp) {
  int32_t token;
  const double u = l.take_u();
  if (l.req.sampling.adjusts()) {
    std::vector<float> adjusted = logits;
    l.smp.adjust(adjusted, scheduler_->tokens(l.id), static_cast<size_t>(l.prompt_tokens));
    token = l.smp.next(adjusted, u);
  } else {
    token = l.smp.next(logits, u);
  }
  if (l.req.logprobs >= 0) lp = logprob_of(logits, token, l.req.logprobs);
  return token;
}

void llm_engine::attach_sampling(backends::step_batch& batch) {
  for (auto& s : batch.seqs) {
    if (!s.want_logits) continue;
    auto it = live_.find(s.seq_id);
    if (it == live_.end()) continue;
    live& l = *it->second;
    const auto& tokens = scheduler_->tokens(l.id);
    const int64_t end = int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size());
    // A prompt position scored (its logits give a prompt token's log-probability) and the row
    // the other choices fork from are sampled here from their logits.
    if (end < static_cast<int64_t>(tokens.size()) || !l.pending.empty()) continue;
    s.sample = l.smp.row_params(l.send_u(), tokens, static_cast<size_t>(l.prompt_tokens), l.req.logprobs, info_.vocab_size);
  }
}

void llm_engine::took(live& l, int32_t token, token_logprob lp, clock_type_point after, double modelled_step) {
  auto& m = metrics_->llm;
  ++l.generated;
  m.generation_tokens.fetch_add(1);
  ++generated_;
  if (l.first_token) {
    l.first_token = false;
    m.time_to_first_token.observe(seconds_between(l.arrival, after));
    l.first_token_at = after;
    l.modelled_first = modelled_now_;
    if (modelled_step > 0) m.modelled_time_to_first_token.observe(modelled_now_ - l.modelled_arrival);
  } else {
    m.inter_token_latency.observe(seconds_between(l.last_token, after));
    if (modelled_step > 0) m.modelled_inter_token_latency.observe(modelled_now_ - l.modelled_last);
  }
  l.last_token = after;
  l.modelled_last = modelled_now_;
  const bool stop_token = (!l.req.ignore_eos && token == tokenizer_->eos_id()) ||
                          std::find(l.req.stop_token_ids.begin(), l.req.stop_token_ids.end(), token) !=
                              l.req.stop_token_ids.end();
  if (stop_token || l.generated >= l.req.max_tokens) {
    deliver(l.id, token, stop_token, std::move(lp));  // ends now: the scheduler must not run it again
  } else {
    // Its text (stream decoding, stop strings, the event) waits until the next step is on its
    // way: the backend then computes while this thread streams.
    deferred_.push_back({l.id, token, std::move(lp)});
  }
}

// A step on its way to the backend and back.
struct llm_engine::flight {
  step_plan plan;
  std::future<backends::step_result> answer;
  clock_type::time_point t_sched, t_planned, t_submitted, t_streamed;
  bool done_applied = false;  // step_done() ran when the next step was formed (async scheduling)
  bool speculable = false;    // every token it yields is sampled on the backend: the next step may go first
  std::unordered_map<uint64_t, int32_t> rows;  // sequence -> its logits row, sampled on the backend
};

bool llm_engine::intake(bool wait) {
  auto& m = metrics_->llm;
  std::unique_lock lock(mu_);
  if (wait) {
    if (!deferred_.empty() && !scheduler_->has_work()) {
      lock.unlock();
      flush_deferred();
      lock.lock();
    }
    cv_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || scheduler_->has_work(); });
  }
  if (stopping_) return false;
  // Taken out of the inbox first: the loop unlocks to finish a request, and a submit meanwhile
  // appends to the inbox (which would invalidate this loop and be cleared unseen).
  auto arrived = std::move(inbox_);
  inbox_.clear();
  for (auto& [id, l] : arrived) {
    auto* raw = l.get();
    if (l->req.max_tokens == 0 && l->prompt_tokens == 1) {
      // Scoring a one-token prompt: its only log-probability is none; nothing to compute.
      raw->prompt_scored = true;
      live_.emplace(id, std::move(l));
      lock.unlock();
      m.prompt_tokens.fetch_add(1);
      finish(*raw, "length");
      live_.erase(id);
      lock.lock();
      continue;
    }
    auto st = scheduler_->add(id, l->req.prompt, l->req.max_tokens, l->req.prompt_logprobs);
    live_.emplace(id, std::move(l));
    if (!st.ok()) {
      lock.unlock();
      finish(*raw, "error", st);
      live_.erase(id);
      lock.lock();
    } else {
      m.prompt_tokens.fetch_add(static_cast<uint64_t>(raw->prompt_tokens));
      raw->modelled_arrival = modelled_now_;
    }
  }
  for (uint64_t id : cancels_) {
    scheduler_->cancel(id);
    // Choice 0's id cancels every choice of its request (forked ones have the ids after it).
    auto it = live_.find(id);
    if (it != live_.end() && it->second->index == 0)
      for (uint64_t i = 1; i < static_cast<uint64_t>(it->second->req.n); ++i) scheduler_->cancel(id + i);
  }
  cancels_.clear();
  return true;
}

void llm_engine::speculate(flight& f) {
  // Step t is computed as far as the scheduler is concerned (it is, once the backend answers; a
  // failure recomputes everything), and each token it samples is a placeholder the next step
  // names by its row, which the backend takes from step t's samples.
  scheduler_->step_done(f.plan);
  f.done_applied = true;
  for (const auto& [id, row] : f.rows) scheduler_->speculate(id);
}

bool llm_engine::form(std::deque<flight>& flights) {
  auto& m = metrics_->llm;
  flight f;
  f.t_sched = clock_type::now();
  f.plan = scheduler_->schedule();
  step_plan& plan = f.plan;
  // The blocks this step took, before its requests stop counting as queued: a router choosing
  // among replicas meanwhile sees them one way or the other, never neither.
  update_gauges();
  f.t_planned = clock_type::now();
  for (uint64_t id : plan.cancelled) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    finish(*it->second, "cancelled", status(errc::cancelled, "cancelled by the client"));
    live_.erase(it);
  }
  if (plan.empty()) {
    if (!flights.empty()) return false;  // the sequences left end with the step in flight
    flush_deferred();
    update_gauges();
    if (scheduler_->has_work()) {
      // Waiting requests and nothing runnable: cannot happen (add() refuses what never fits);
      // fail them rather than spin.
      TESSERA_LOG_ERROR("LLM scheduler has waiting requests and formed no step");
      for (auto& [id, l] : live_) {
        scheduler_->finish(id);
        finish(*l, "error", status::internal("the scheduler could not place this request"));
      }
      live_.clear();
    }
    return false;
  }
  const auto now = clock_type::now();
  for (const auto& s : plan.batch.seqs) {
    auto& l = *live_.at(s.seq_id);
    if (!l.scheduled) {
      l.scheduled = true;
      queued_tokens_.fetch_sub(l.prompt_tokens);
      m.queue_time.observe(seconds_between(l.arrival, now));
    }
  }
  if (info_.samples && cfg_.sample_on_backend) attach_sampling(plan.batch);
  // Async scheduling: a placeholder is the token the step in flight samples for it, by its row.
  for (auto& s : plan.batch.seqs)
    for (auto& t : s.tokens) {
      if (t != llm_scheduler::kPendingToken) continue;
      TESSERA_CHECK(!flights.empty() && flights.back().rows.count(s.seq_id))
          << "sequence " << s.seq_id << " awaits a token no step in flight samples";
      t = -(flights.back().rows.at(s.seq_id) + 1);
    }
  f.speculable = async_;
  int32_t row = 0;
  for (const auto& s : plan.batch.seqs) {
    if (!s.want_logits) continue;
    const int32_t i = row++;
    auto it = live_.find(s.seq_id);
    if (!s.sample || s.sample->penalized() || it == live_.end() || !it->second->pending.empty()) {
      f.speculable = false;  // its token comes from logits here, or its penalties need it
      continue;
    }
    f.rows.emplace(s.seq_id, i);
  }
  // One step at a time, or two with async scheduling: the backend's K/V state is what the
  // scheduler believes it is once the steps sent are answered, in order.
  auto answer = std::make_shared<std::promise<backends::step_result>>();
  f.answer = answer->get_future();
  backend_->submit(plan.batch, [answer](backends::step_result r) { answer->set_value(std::move(r)); });
  f.t_submitted = clock_type::now();
  flights.push_back(std::move(f));
  return true;
}

void llm_engine::run() {
  const auto t0 = clock_type::now();
  scheduler_stats last{};
  int64_t last_queries = 0;
  std::deque<flight> flights;  // sent, not answered; oldest first
  for (;;) {
    // Take new requests and cancellations in; sleep while there is nothing to do.
    if (!intake(flights.empty())) {
      for (auto& f : flights) f.answer.wait();  // their callbacks hold the promises; nothing else
      flush_deferred();
      return;
    }
    if (flights.empty() && !form(flights)) continue;
    // Async scheduling: step t+1 goes out while step t runs.
    if (flights.size() == 1 && flights.back().speculable) {
      speculate(flights.back());
      if (form(flights)) ++formed_ahead_;
    }
    flush_deferred();  // the last step's text, while this one runs
    flights.back().t_streamed = clock_type::now();
    flight f = std::move(flights.front());
    flights.pop_front();
    answered(f, f.answer.get(), flights, t0, last, last_queries);
  }
}

void llm_engine::answered(flight& f, backends::step_result r, std::deque<flight>& flights, clock_type_point t0,
                          scheduler_stats& last, int64_t& last_queries) {
  auto& m = metrics_->llm;
  const step_plan& plan = f.plan;
  const auto t_answered = clock_type::now();
  m.steps.fetch_add(1);
  m.step_duration.observe(r.wall_seconds);
  if (r.modelled_seconds > 0) {
    // The emulated device's clock: it runs the steps one after another.
    modelled_now_ += r.modelled_seconds;
    m.modelled_step_duration.observe(r.modelled_seconds);
    m.modelled_seconds_total.store(modelled_now_);
  }
  m.step_tokens.observe(static_cast<double>(plan.batch.num_tokens()));
  if (!r.st.ok()) {
    for (auto& [id, l] : live_) l->sent = 0;  // draws sent with unanswered steps go with the next ones
    auto fail_step_sequences = [&] {
      for (const auto& s : plan.batch.seqs) {
        auto it = live_.find(s.seq_id);
        if (it == live_.end()) continue;
        scheduler_->finish(s.seq_id);
        finish(*it->second, "error", r.st);
        live_.erase(it);
      }
    };
    if (f.done_applied || !flights.empty()) {
      // Async: the step after it took its samples and is answered as failed too. What ran is
      // computed again (and the prefix cache, told of blocks this step was to fill, forgotten);
      // a step that failed outright fails its sequences as the synchronous path does.
      TESSERA_LOG_WARN("decoder step failed with a step after it in flight (" << r.st.message() << "); recomputing "
                       << scheduler_->running() << " running sequences");
      for (auto& g : flights) (void)g.answer.get();
      flights.clear();
      if (!r.kv_lost) fail_step_sequences();
      scheduler_->unspeculate();
      scheduler_->lose_kv();
      update_gauges();
      return;
    }
    if (r.kv_lost) {
      // A tile came back empty: recompute what was running; no request fails.
      TESSERA_LOG_WARN("decoder backend lost its KV cache (" << r.st.message() << "); recomputing "
                       << scheduler_->running() << " running sequences");
      scheduler_->lose_kv();
      update_gauges();
      return;
    }
    // The step's sequences fail; the others go on.
    TESSERA_LOG_WARN("decoder step failed: " << r.st.to_string());
    fail_step_sequences();
    update_gauges();
    return;
  }
  if (!f.done_applied) scheduler_->step_done(plan);
  const auto st = scheduler_->stats();
  m.preemptions.fetch_add(static_cast<uint64_t>(st.preemptions - last.preemptions));
  m.prefix_hit_tokens.fetch_add(static_cast<uint64_t>(st.prefix_hit_tokens - last.prefix_hit_tokens));
  m.prefill_tokens.fetch_add(static_cast<uint64_t>(st.prefill_tokens - last.prefill_tokens));
  const int64_t queries = scheduler_->blocks().prefix_query_blocks() * info_.block_tokens;
  m.prefix_query_tokens.fetch_add(static_cast<uint64_t>(queries - last_queries));
  last_queries = queries;
  last = st;

  size_t row = 0;
  const auto after = clock_type::now();
  const size_t rows = std::max(r.logits.size(), r.samples.size());
  static const std::vector<float> no_logits;
  for (const auto& s : plan.batch.seqs) {
    if (!s.want_logits) continue;
    if (row >= rows) break;
    const size_t i = row++;
    const auto& logits = i < r.logits.size() ? r.logits[i] : no_logits;
    // Sampled where the LM head is (seq_step::sample): the token and its log-probabilities.
    token_logprob* tile = i < r.samples.size() && r.samples[i].token >= 0 ? &r.samples[i] : nullptr;
    auto it = live_.find(s.seq_id);
    if (it == live_.end()) continue;  // ended meanwhile (a step sent after it ended: nothing of it counts)
    live& l = *it->second;
    if (tile && (!s.sample || !l.pending.empty())) {
      scheduler_->finish(l.id);
      finish(l, "error", status::internal("the backend sampled a row that asked for its logits"));
      live_.erase(it);
      continue;
    }
    if (!tile && static_cast<int32_t>(logits.size()) != info_.vocab_size) {
      scheduler_->finish(l.id);
      finish(l, "error", status::internal("the backend answered logits of the wrong size"));
      live_.erase(it);
      continue;
    }
    const int32_t end = s.start_pos + static_cast<int32_t>(s.tokens.size());
    // Its tokens so far, less a placeholder this very row fills (async scheduling).
    const auto known = static_cast<int32_t>(scheduler_->tokens(l.id).size()) - (scheduler_->pending(l.id) ? 1 : 0);
    if (end < known) {
      // A prompt position's row (scoring): the log-probability of the prompt token after it.
      if (end < l.prompt_tokens && l.req.prompt_logprobs)
        l.prompt_lp[static_cast<size_t>(end)] =
            logprob_of(logits, l.req.prompt[static_cast<size_t>(end)], std::max(l.req.logprobs, 0));
      if (l.req.max_tokens == 0 && end == l.prompt_tokens - 1) {
        l.prompt_scored = true;
        scheduler_->finish(l.id);
        finish(l, "length");
        live_.erase(it);
      }
      continue;
    }
    if (l.req.prompt_logprobs && !l.prompt_scored && l.generated == 0) l.prompt_scored = true;
    if (!l.pending.empty()) {
      // The other choices fork here: their first tokens from this same row, the prompt's full
      // blocks shared with choice 0.
      auto pending = std::move(l.pending);
      l.pending.clear();
      for (auto& p : pending) {
        live& c = *p;
        c.prompt_lp = l.prompt_lp;
        c.prompt_scored = l.prompt_scored;
        c.modelled_arrival = l.modelled_arrival;
        token_logprob lp;
        int32_t token;
        if (c.req.sampling.adjusts()) {
          std::vector<float> adjusted = logits;
          c.smp.adjust(adjusted, c.req.prompt, c.req.prompt.size());
          token = c.smp.next(adjusted);
        } else {
          token = c.smp.next(logits);
        }
        if (c.req.logprobs >= 0) lp = logprob_of(logits, token, c.req.logprobs);
        const uint64_t cid = c.id;
        auto fst = scheduler_->fork(l.id, cid, token, c.req.max_tokens);
        live_.emplace(cid, std::move(p));
        if (!fst.ok()) {
          finish(c, "error", fst);
          live_.erase(cid);
          continue;
        }
        took(c, token, std::move(lp), after, r.modelled_seconds);
      }
    }
    token_logprob lp;
    int32_t token;
    if (tile) {
      token = tile->token;
      l.take_u();  // the draw the tile used
      if (l.req.logprobs >= 0) lp = std::move(*tile);
    } else {
      token = sample(l, logits, lp);
    }
    scheduler_->append(l.id, token);
    took(l, token, std::move(lp), after, r.modelled_seconds);
  }
  // Generated tokens per second over the last ~10 s.
  const double t = seconds_between(t0, clock_type::now());
  rate_window_.emplace_back(t, generated_);
  while (rate_window_.size() > 2 && rate_window_.front().first < t - 10) rate_window_.pop_front();
  const auto& [t_first, n_first] = rate_window_.front();
  const double rate = t > t_first ? static_cast<double>(rate_window_.back().second - n_first) / (t - t_first) : 0;
  m.tokens_per_second.fetch_add(rate - tokens_per_second_);  // a sum over the engines sharing the metrics
  tokens_per_second_ = rate;
  update_gauges();
  if (step_log_) {
    llm_step_record rec;
    rec.step = st.steps;
    rec.start_s = seconds_between(t0, f.t_sched);
    rec.schedule_ms = 1e3 * seconds_between(f.t_sched, f.t_planned);
    rec.backend_ms = 1e3 * seconds_between(f.t_planned, t_answered);
    rec.post_ms = 1e3 * seconds_between(t_answered, clock_type::now());
    rec.compute_ms = 1e3 * r.compute_seconds;
    rec.modelled_ms = 1e3 * r.modelled_seconds;
    rec.stream_ms = 1e3 * std::max(0.0, seconds_between(f.t_submitted, f.t_streamed));
    rec.seqs = static_cast<int32_t>(plan.batch.seqs.size());
    for (const auto& s : plan.batch.seqs) {
      rec.logits += s.want_logits ? 1 : 0;
      rec.prefill_seqs += s.tokens.size() > 1 || s.start_pos < scheduler_->prompt_length(s.seq_id) ? 1 : 0;
    }
    rec.prefill_tokens = plan.prefill_tokens;
    rec.decode_tokens = plan.decode_tokens;
    rec.running = static_cast<int32_t>(scheduler_->running());
    rec.waiting = static_cast<int32_t>(scheduler_->waiting());
    rec.preempted = plan.preempted;
    const auto& b = scheduler_->blocks();
    rec.kv_used = b.used_blocks();
    rec.kv_free = b.free_blocks();
    rec.kv_cached = b.cached_blocks();
    *step_log_ << rec.csv() << '\n';
  }
}

}  // namespace tessera::serving
