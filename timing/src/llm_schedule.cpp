// Static and continuous batching on the step model's clock (a discrete-event simulation).
#include "tessera/timing/llm_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>

namespace tessera::timing {
namespace {

int64_t draw(std::mt19937_64& rng, const length_fit& f) {
  const double mu = std::log(f.mean) - f.sigma * f.sigma / 2;  // E[exp(N(mu, s))] = mean
  std::lognormal_distribution<double> dist(mu, f.sigma);
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(dist(rng))), f.lo, f.hi);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * double(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

struct seq_state {
  int64_t req = 0;
  int64_t prompt_left = 0;  // tokens still to prefill (after a preemption: prompt + generated)
  int64_t context = 0;      // tokens whose K/V are cached
  int64_t generated = 0;    // output tokens produced
  int64_t reserved = 0;     // KV tokens reserved (blocks x block_tokens)
};

struct req_state {
  double admitted = -1, first = -1, last = -1;
};

struct replica_state {
  std::deque<int64_t> waiting;
  std::vector<seq_state> running;   // continuous: admission order; static: the batch
  size_t pool = 0;                  // the KV pool it draws on
  int64_t static_reserved = 0;      // static: the batch's padded KV tokens
  bool busy = false;
  double busy_until = 0;
  // static batching: the current batch's padded shape and progress
  int64_t static_prompt = 0, static_steps_left = 0, static_done = 0;
  // the step in flight
  llm_step_batch step;
  std::vector<int64_t> step_prefill_seq;   // running index of each prefill chunk
  std::vector<int64_t> step_decode_seq;    // running index of each decode
  size_t load() const { return waiting.size() + running.size(); }
};

class simulator {
 public:
  simulator(const llm_system& sys, const decoder_dims& d, const std::vector<llm_request>& trace, const schedule_options& o)
      : sys_(sys), d_(d), trace_(trace), o_(o), reqs_(trace.size()), replicas_(size_t(std::max<int64_t>(1, sys.replicas))) {
    capacity_ = static_cast<int64_t>(sys.kv_capacity_bytes / d.kv_bytes_per_token());
    capacity_ -= capacity_ % o.block_tokens;
    const size_t per_pool = size_t(std::max<int64_t>(1, sys.replicas_per_pool));
    pool_free_.assign((replicas_.size() + per_pool - 1) / per_pool, capacity_);
    for (size_t i = 0; i < replicas_.size(); ++i) replicas_[i].pool = i / per_pool;
  }

  result<schedule_report> run() {
    std::vector<size_t> order(trace_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return trace_[a].arrival_s < trace_[b].arrival_s; });
    size_t next = 0, rr = 0;
    while (true) {
      const double ta = next < order.size() ? trace_[order[next]].arrival_s : std::numeric_limits<double>::infinity();
      double tc = std::numeric_limits<double>::infinity();
      size_t rc = 0;
      for (size_t i = 0; i < replicas_.size(); ++i)
        if (replicas_[i].busy && replicas_[i].busy_until < tc) tc = replicas_[i].busy_until, rc = i;
      if (std::isinf(ta) && std::isinf(tc)) break;
      if (ta <= tc) {
        const int64_t id = static_cast<int64_t>(order[next++]);
        // the least-loaded replica, ties broken round robin
        size_t best = rr % replicas_.size();
        for (size_t k = 0; k < replicas_.size(); ++k) {
          size_t i = (rr + k) % replicas_.size();
          if (replicas_[i].load() < replicas_[best].load()) best = i;
        }
        rr = best + 1;
        replicas_[best].waiting.push_back(id);
        if (!replicas_[best].busy) TESSERA_RETURN_IF_ERROR(start_step(replicas_[best], ta));
      } else {
        freed_ = false;
        finish_step(replicas_[rc], tc);
        TESSERA_RETURN_IF_ERROR(start_step(replicas_[rc], tc));
        if (freed_)  // blocks came free: idle replicas of the same pool with waiting requests start
          for (auto& other : replicas_)
            if (!other.busy && other.pool == replicas_[rc].pool && !other.waiting.empty())
              TESSERA_RETURN_IF_ERROR(start_step(other, tc));
      }
    }
    return report();
  }

 private:
  int64_t blocks(int64_t tokens) const { return (tokens + o_.block_tokens - 1) / o_.block_tokens * o_.block_tokens; }

  // Grows a sequence's reservation to hold `tokens` cached tokens; false if the blocks are not free.
  bool reserve(replica_state& r, seq_state& s, int64_t tokens) {
    const int64_t need = blocks(tokens) - s.reserved;
    if (need <= 0) return true;
    if (need > pool_free_[r.pool]) return false;
    pool_free_[r.pool] -= need, s.reserved += need;
    return true;
  }

  status start_step(replica_state& r, double now) {
    r.step = {};
    r.step_prefill_seq.clear();
    r.step_decode_seq.clear();
    if (o_.policy == batching::static_batch) {
      TESSERA_RETURN_IF_ERROR(form_static(r, now));
    } else {
      TESSERA_RETURN_IF_ERROR(form_continuous(r, now));
    }
    if (r.step.tokens() == 0) {
      r.busy = false;
      return {};
    }
    auto t = model_llm_step(sys_, d_, r.step);
    if (!t) return t.error();
    ++steps_, step_tokens_ += r.step.tokens(), memory_bound_steps_ += t->memory_bound() ? 1 : 0;
    r.busy = true;
    r.busy_until = now + t->seconds;
    return {};
  }

  status too_big(int64_t id) const {
    const auto& q = trace_[size_t(id)];
    return status::out_of_memory("request " + std::to_string(id) + " (prompt " + std::to_string(q.prompt) + ", output " +
                                 std::to_string(q.output) + " tokens) cannot fit one replica's KV memory of " +
                                 std::to_string(capacity_) + " tokens on " + sys_.spec);
  }

  status form_continuous(replica_state& r, double now) {
    // Decodes first: each needs room for one more cached token; preempt the newest when out of blocks.
    for (size_t i = 0; i < r.running.size(); ++i) {
      if (r.running[i].prompt_left > 0) continue;
      bool dropped = false;
      while (!reserve(r, r.running[i], r.running[i].context + 1)) {
        const size_t victim = r.running.size() - 1;  // the newest
        preempt(r, victim);
        if (victim == i) {
          dropped = true;
          break;
        }
      }
      if (dropped) break;  // i was the newest: nothing after it remains
    }
    int64_t budget = o_.token_budget;
    for (size_t i = 0; i < r.running.size(); ++i) {
      if (r.running[i].prompt_left > 0) continue;
      r.step.decode_contexts.push_back(r.running[i].context);
      r.step_decode_seq.push_back(int64_t(i));
      --budget;
    }
    // Prompt chunks of running sequences (their prompt's blocks were reserved at admission).
    for (size_t i = 0; i < r.running.size() && budget > 0; ++i) {
      seq_state& s = r.running[i];
      if (s.prompt_left == 0) continue;
      const int64_t k = std::min(s.prompt_left, budget);
      r.step.prefills.push_back({k, s.context, k == s.prompt_left});
      r.step_prefill_seq.push_back(int64_t(i));
      budget -= k;
    }
    // Admit waiting requests whose whole prompt fits.
    while (budget > 0 && !r.waiting.empty() && int64_t(r.running.size()) < o_.max_seqs) {
      const int64_t id = r.waiting.front();
      const auto& q = trace_[size_t(id)];
      if (blocks(q.prompt + q.output) > capacity_) return too_big(id);
      seq_state s;
      s.req = id;
      s.prompt_left = q.prompt + preempted_generated(id);
      if (!reserve(r, s, s.prompt_left)) break;  // waits for blocks (freed by its own or a pool mate's sequences)
      r.waiting.pop_front();
      if (reqs_[size_t(id)].admitted < 0) reqs_[size_t(id)].admitted = now;
      s.generated = preempted_generated(id);
      r.running.push_back(s);
      const int64_t k = std::min(s.prompt_left, budget);
      r.step.prefills.push_back({k, 0, k == s.prompt_left});
      r.step_prefill_seq.push_back(int64_t(r.running.size() - 1));
      budget -= k;
    }
    return {};
  }

  int64_t preempted_generated(int64_t id) const {
    auto it = std::find_if(preempted_.begin(), preempted_.end(), [&](const auto& p) { return p.first == id; });
    return it == preempted_.end() ? 0 : it->second;
  }

  void preempt(replica_state& r, size_t i) {
    seq_state s = r.running[i];
    pool_free_[r.pool] += s.reserved;
    r.running.erase(r.running.begin() + std::ptrdiff_t(i));
    auto it = std::find_if(preempted_.begin(), preempted_.end(), [&](const auto& p) { return p.first == s.req; });
    if (it == preempted_.end()) preempted_.push_back({s.req, s.generated});
    else it->second = s.generated;
    r.waiting.push_front(s.req);
    ++preemptions_;
  }

  status form_static(replica_state& r, double now) {
    if (!r.running.empty()) {  // a batch in progress: one padded decode step for every row
      for (size_t i = 0; i < r.running.size(); ++i) {
        r.step.decode_contexts.push_back(r.static_prompt + r.static_done);
        r.step_decode_seq.push_back(int64_t(i));
      }
      return {};
    }
    if (r.waiting.empty()) return {};
    int64_t max_prompt = 0, max_output = 0;
    size_t take = 0;
    for (; take < r.waiting.size() && int64_t(take) < o_.static_batch; ++take) {
      const auto& q = trace_[size_t(r.waiting[take])];
      const int64_t p = std::max(max_prompt, q.prompt), out = std::max(max_output, q.output);
      if (int64_t(take + 1) * blocks(p + out) > pool_free_[r.pool]) {
        if (take == 0 && blocks(p + out) > capacity_) return too_big(r.waiting[0]);
        break;  // waits for the pool (shared with other replicas) to free blocks
      }
      max_prompt = p, max_output = out;
    }
    if (take == 0) return {};
    r.static_reserved = int64_t(take) * blocks(max_prompt + max_output);
    pool_free_[r.pool] -= r.static_reserved;
    r.static_prompt = max_prompt;
    r.static_done = 0;
    r.static_steps_left = max_output;  // the prefill step and max_output - 1 decode steps
    for (size_t i = 0; i < take; ++i) {
      const int64_t id = r.waiting.front();
      r.waiting.pop_front();
      reqs_[size_t(id)].admitted = now;
      seq_state s;
      s.req = id;
      r.running.push_back(s);
      r.step.prefills.push_back({max_prompt, 0, true});
      r.step_prefill_seq.push_back(int64_t(i));
    }
    return {};
  }

  void finish_step(replica_state& r, double now) {
    r.busy = false;
    if (o_.policy == batching::static_batch) {
      // every row advances one token; a request's tokens stream until its own output is complete
      for (auto& s : r.running) {
        const auto& q = trace_[size_t(s.req)];
        if (s.generated < q.output) {
          ++s.generated;
          req_state& st = reqs_[size_t(s.req)];
          if (s.generated == 1) st.first = now;
          if (s.generated == q.output) st.last = now;
        }
      }
      if (!r.step.prefills.empty()) r.static_done = 0;
      else ++r.static_done;
      if (--r.static_steps_left == 0) {
        r.running.clear();
        pool_free_[r.pool] += r.static_reserved;
        r.static_reserved = 0;
        freed_ = true;
      }
      return;
    }
    for (size_t k = 0; k < r.step.prefills.size(); ++k) {
      seq_state& s = r.running[size_t(r.step_prefill_seq[k])];
      const auto& c = r.step.prefills[k];
      s.context += c.tokens;
      s.prompt_left -= c.tokens;
      if (s.prompt_left == 0) produce(s, now);
    }
    for (int64_t i : r.step_decode_seq) {
      seq_state& s = r.running[size_t(i)];
      s.context += 1;
      produce(s, now);
    }
    // retire finished sequences
    for (size_t i = 0; i < r.running.size();) {
      const seq_state& s = r.running[i];
      if (s.prompt_left == 0 && s.generated >= trace_[size_t(s.req)].output) {
        pool_free_[r.pool] += s.reserved;
        freed_ = true;
        r.running.erase(r.running.begin() + std::ptrdiff_t(i));
      } else {
        ++i;
      }
    }
  }

  void produce(seq_state& s, double now) {
    ++s.generated;
    req_state& st = reqs_[size_t(s.req)];
    if (st.first < 0) st.first = now;
    if (s.generated >= trace_[size_t(s.req)].output) st.last = now;
  }

  result<schedule_report> report() const {
    schedule_report rep;
    rep.requests = int64_t(trace_.size());
    std::vector<double> ttft, tpot, e2e;
    double first_arrival = std::numeric_limits<double>::infinity(), last = 0;
    for (size_t i = 0; i < trace_.size(); ++i) {
      const auto& q = trace_[i];
      const auto& st = reqs_[i];
      if (st.last < 0) return status::internal("request " + std::to_string(i) + " never finished");
      rep.output_tokens += q.output;
      first_arrival = std::min(first_arrival, q.arrival_s);
      last = std::max(last, st.last);
      ttft.push_back(st.first - q.arrival_s);
      e2e.push_back(st.last - q.arrival_s);
      const double t_tpot = q.output > 1 ? (st.last - st.first) / double(q.output - 1) : 0;
      if (q.output > 1) tpot.push_back(t_tpot);
      if ((o_.goodput_ttft_s <= 0 || ttft.back() <= o_.goodput_ttft_s) && (o_.goodput_tpot_s <= 0 || t_tpot <= o_.goodput_tpot_s))
        ++rep.good;
    }
    rep.duration_s = last - first_arrival;
    rep.tokens_per_s = rep.duration_s > 0 ? double(rep.output_tokens) / rep.duration_s : 0;
    // Goodput per second from the trace's time 0 (a run's start: vLLM's benchmark duration and
    // tessera-loadgen's) to the last token, not from the first arrival.
    rep.goodput_rps = last > 0 ? double(rep.good) / last : 0;
    rep.ttft_p50_s = percentile(ttft, 50), rep.ttft_p99_s = percentile(ttft, 99);
    rep.tpot_p50_s = percentile(tpot, 50), rep.tpot_p99_s = percentile(tpot, 99);
    rep.e2e_p50_s = percentile(e2e, 50), rep.e2e_p99_s = percentile(e2e, 99);
    rep.steps = steps_;
    rep.mean_step_tokens = steps_ > 0 ? double(step_tokens_) / double(steps_) : 0;
    rep.preemptions = preemptions_;
    rep.memory_bound_fraction = steps_ > 0 ? double(memory_bound_steps_) / double(steps_) : 0;
    return rep;
  }

  const llm_system& sys_;
  const decoder_dims& d_;
  const std::vector<llm_request>& trace_;
  schedule_options o_;
  std::vector<req_state> reqs_;
  std::vector<replica_state> replicas_;
  std::vector<int64_t> pool_free_;  // free KV tokens per pool
  bool freed_ = false;              // the step just finished released blocks
  std::vector<std::pair<int64_t, int64_t>> preempted_;  // request -> tokens generated when preempted
  int64_t capacity_ = 0;
  int64_t steps_ = 0, step_tokens_ = 0, memory_bound_steps_ = 0, preemptions_ = 0;
};

}  // namespace

std::string_view batching_name(batching b) { return b == batching::continuous ? "continuous" : "static"; }

std::vector<llm_request> poisson_trace(int64_t n, double rate_per_s, const chat_traffic& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate_per_s > 0 ? rate_per_s : 1.0);
  std::vector<llm_request> v;
  double at = 0;
  for (int64_t i = 0; i < n; ++i) {
    llm_request q;
    if (rate_per_s > 0) at += gap(rng);
    q.arrival_s = at;
    q.prompt = draw(rng, t.prompt);
    q.output = draw(rng, t.output);
    v.push_back(q);
  }
  return v;
}

result<schedule_report> simulate_llm_serving(const llm_system& sys, const decoder_dims& d,
                                             const std::vector<llm_request>& trace, const schedule_options& o) {
  if (trace.empty()) return status::invalid("an empty trace: nothing to serve");
  if (o.max_seqs <= 0 || o.token_budget <= 0 || o.static_batch <= 0 || o.block_tokens <= 0)
    return status::invalid("max_seqs, token_budget, static_batch and block_tokens must be positive");
  if (!(o.goodput_ttft_s >= 0) || !(o.goodput_tpot_s >= 0)) return status::invalid("goodput bounds must be >= 0");
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].prompt < 1 || trace[i].output < 1 || !(trace[i].arrival_s >= 0))
      return status::invalid("request " + std::to_string(i) + ": prompt and output need >= 1 token, arrival >= 0");
  simulator sim(sys, d, trace, o);
  return sim.run();
}

result<slo_point> throughput_at_slo(const llm_system& sys, const decoder_dims& d, const chat_traffic& t,
                                    const schedule_options& o, const llm_slo& slo, int64_t n, uint64_t seed) {
  slo_point best;
  auto at_once = simulate_llm_serving(sys, d, poisson_trace(n, 0, t, seed), o);
  if (!at_once) return at_once.error();
  best.max_tokens_per_s = at_once->tokens_per_s;
  // Requests per second the system could sustain at most; the SLO rate lies below it.
  const double mean_output = double(at_once->output_tokens) / double(n);
  double hi = 1.2 * at_once->tokens_per_s / mean_output, lo = 0;
  auto meets = [&](const schedule_report& r) { return r.ttft_p99_s <= slo.ttft_p99_s && r.tpot_p99_s <= slo.tpot_p99_s; };
  for (int it = 0; it < 14; ++it) {
    const double rate = lo == 0 && it == 0 ? hi / 64 : (lo + hi) / 2;
    auto r = simulate_llm_serving(sys, d, poisson_trace(n, rate, t, seed), o);
    if (!r) return r.error();
    if (meets(*r)) {
      lo = rate;
      best.rate_per_s = rate;
      best.report = *r;
    } else {
      hi = rate;
    }
    if (hi - lo < 0.01 * hi) break;
  }
  return best;
}

}  // namespace tessera::timing
