#include "tessera/host/tile_llm_backend.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "tessera/common/log.hpp"
#include "tessera/host/tile_backend.hpp"

namespace tessera::host {

using steady = std::chrono::steady_clock;

// The decoder its replicas' backends share, and the one listener of the tile group's events,
// which hands a tile's failure to every member (each keeps those of its own tiles).
struct tile_llm_backend::shared_decoder {
  std::unique_ptr<tile_decoder> dec;
  std::atomic<int64_t> traced{0};  // steps recorded in the trace by all replicas
  std::mutex mu;
  std::vector<tile_llm_backend*> members;
  explicit shared_decoder(std::unique_ptr<tile_decoder> d) : dec(std::move(d)) {
    dec->group().on_event([this](const tile_event& ev) {
      if (ev.what != tile_event::kind::failed) return;
      std::lock_guard lk(mu);
      for (auto* m : members) m->on_tile_failed(ev);
    });
  }
  ~shared_decoder() { dec->group().on_event(nullptr); }
  void leave(tile_llm_backend* m) {
    std::lock_guard lk(mu);
    members.erase(std::remove(members.begin(), members.end(), m), members.end());
  }
};

result<std::vector<std::shared_ptr<tile_llm_backend>>> tile_llm_backend::make(std::unique_ptr<tile_decoder> decoder,
                                                                              std::string prefix,
                                                                              tile_llm_backend_config cfg) {
  if (!decoder) return status::invalid("no decoder");
  auto shared = std::make_shared<shared_decoder>(std::move(decoder));
  std::vector<std::shared_ptr<tile_llm_backend>> out;
  for (int r = 0; r < shared->dec->compiled().chosen.replicas; ++r) {
    out.push_back(std::shared_ptr<tile_llm_backend>(new tile_llm_backend(shared, r, prefix + std::to_string(r), cfg)));
    std::lock_guard lk(shared->mu);
    shared->members.push_back(out.back().get());
  }
  return out;
}

tile_llm_backend::tile_llm_backend(std::shared_ptr<shared_decoder> shared, int replica, std::string name,
                                   tile_llm_backend_config cfg)
    : shared_(std::move(shared)), dec_(shared_->dec.get()), replica_(replica), cfg_(cfg) {
  const auto& c = dec_->compiled();
  info_.name = std::move(name);
  info_.kind = "tiles";
  info_.block_tokens = c.kv.block_tokens;
  info_.num_blocks = c.kv.num_blocks;
  info_.vocab_size = c.config.vocab_size;
  info_.max_positions = c.config.max_position_embeddings;
  info_.samples = true;  // dec_sample on the LM-head tile
  info_.feeds = c.feeds;  // compiled for async scheduling: steps pipelined two deep (work_pipelined)
  tiles_ = dec_->replica_tiles(replica_);
  worker_ = std::thread([this] { work(); });
}

void tile_llm_backend::on_tile_failed(const tile_event& ev) {
  std::lock_guard lk(mu_);
  if (std::find(tiles_.begin(), tiles_.end(), ev.tile) == tiles_.end()) return;
  if (std::find(lost_.begin(), lost_.end(), ev.tile) == lost_.end()) lost_.push_back(ev.tile);
  TESSERA_LOG_WARN(info_.name << ": tile " << ev.tile << " failed: " << ev.why);
  cv_.notify_all();  // an idle worker brings it back now
}

tile_llm_backend::~tile_llm_backend() { stop(); }

int64_t tile_llm_backend::traced_steps() const {
  return std::min(shared_->traced.load(), cfg_.trace ? cfg_.max_traced_steps : 0);
}

void tile_llm_backend::trace(const backends::step_batch& batch, const tile_step_result& r, double start) {
  // A single token that asks for logits is a decode (a one-token last prompt chunk looks the same).
  std::vector<bool> decode;
  for (const auto& s : batch.seqs) decode.push_back(s.tokens.size() == 1 && s.want_logits);
  auto rec = dec_->step_record(replica_, batch, r, start, decode, steps_.load());
  if (auto st = cfg_.trace->record(std::move(rec)); !st.ok())
    TESSERA_LOG_WARN(info_.name << ": a step was not traced: " << st.message());
}

bool tile_llm_backend::healthy() const {
  std::lock_guard lk(mu_);
  return !stopping_;  // a failed tile is brought back; steps wait for it
}

bool tile_llm_backend::recovering() const {
  std::lock_guard lk(mu_);
  return !lost_.empty();
}

void tile_llm_backend::submit(backends::step_batch batch, std::function<void(backends::step_result)> done) {
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      jobs_.push_back({std::move(batch), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  backends::step_result r;
  r.st = status{errc::cancelled, "backend " + info_.name + " is stopping"};
  done(std::move(r));
}

void tile_llm_backend::stop() {
  std::deque<job> left;
  {
    std::lock_guard lk(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    left.swap(jobs_);
  }
  cv_.notify_all();
  for (auto& j : left) {
    backends::step_result r;
    r.st = status{errc::cancelled, "backend " + info_.name + " stopped"};
    j.done(std::move(r));
  }
  if (worker_.joinable()) worker_.join();
  shared_->leave(this);
}

status tile_llm_backend::recover() {
  auto& group = dec_->group();
  const auto deadline = steady::now() + cfg_.max_recovery;
  for (;;) {
    std::vector<uint32_t> failed;
    {
      std::lock_guard lk(mu_);
      if (stopping_) return status{errc::cancelled, info_.name + " stopped during a recovery"};
      failed = lost_;
    }
    for (const auto& t : group.tiles())
      if (t.failed && std::find(tiles_.begin(), tiles_.end(), t.id) != tiles_.end() &&
          std::find(failed.begin(), failed.end(), t.id) == failed.end())
        failed.push_back(t.id);
    if (failed.empty()) return ok_status();
    status last;
    for (uint32_t t : failed) {
      last = bring_back_tile(group, t, [this](uint32_t tile) { return dec_->restore_tile(tile); }, info_.name);
      if (!last.ok()) break;
      std::lock_guard lk(mu_);
      lost_.erase(std::remove(lost_.begin(), lost_.end(), t), lost_.end());
    }
    if (last.ok()) continue;  // look again: another tile may have failed meanwhile
    if (steady::now() >= deadline)
      return status::peer_failed(info_.name + ": the replica did not come back within " +
                                 std::to_string(cfg_.max_recovery.count()) + " ms: " + last.message());
    TESSERA_LOG_WARN(info_.name << " recovery: " << last.message() << "; trying again");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void tile_llm_backend::work() {
  if (info_.feeds) return work_pipelined();
  for (;;) {
    job j;
    bool lost = false;
    bool stale = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !jobs_.empty() || !lost_.empty(); });
      if (stopping_) return;  // stop() answers what is queued
      if (jobs_.empty()) {
        lk.unlock();
        recover_idle();
        continue;
      }
      j = std::move(jobs_.front());
      jobs_.pop_front();
      lost = !lost_.empty();
      stale = std::exchange(kv_stale_, false);
    }
    auto res = stale ? stale_answer() : run_job(j.batch, lost);
    j.done(std::move(res));
  }
}

void tile_llm_backend::recover_idle() {
  // A tile failed while the replica had no step: bring it back now rather than at the next
  // step (the router sends new requests elsewhere meanwhile, recovering()). Its KV is gone:
  // the next step answers kv_lost so the engine recomputes and forgets its prefix cache.
  status st = recover();
  std::unique_lock lk(mu_);
  if (st.ok()) {
    ++recoveries_;
    kv_stale_ = true;
    TESSERA_LOG_WARN(info_.name << ": replica back after a tile failure while idle");
  } else if (!stopping_) {
    TESSERA_LOG_WARN(info_.name << ": " << st.message() << "; trying again");
    cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stopping_; });
  }
}

backends::step_result tile_llm_backend::stale_answer() const {
  backends::step_result res;
  res.st = status::peer_failed(info_.name + ": a tile failed and was brought back; its KV cache is empty");
  res.kv_lost = true;
  return res;
}

std::vector<uint32_t> tile_llm_backend::failed_tiles() {
  std::vector<uint32_t> out;
  for (const auto& t : dec_->group().tiles())
    if (t.failed && std::find(tiles_.begin(), tiles_.end(), t.id) != tiles_.end()) out.push_back(t.id);
  return out;
}

void tile_llm_backend::took_step(const backends::step_batch& batch, tile_step_result& r, double trace_start,
                                 backends::step_result& res) {
  if (cfg_.trace && shared_->traced.fetch_add(1) < cfg_.max_traced_steps) trace(batch, r, trace_start);
  res.st = ok_status();
  res.logits = std::move(r.logits);
  res.samples = std::move(r.samples);
  ++steps_;
  supersteps_ += r.supersteps;
  res.compute_seconds = r.busiest_compute_seconds;
  bytes_ += r.bytes_exchanged;
}

backends::step_result tile_llm_backend::run_job(const backends::step_batch& batch, bool lost) {
  backends::step_result res;
  const auto t0 = steady::now();
  // A step that fails without a failed tile (a lost slice, an exchange timeout) runs again: its
  // new positions' K/V are written again, earlier ones were not touched.
  const double trace_start = cfg_.trace ? cfg_.trace->now() : 0;
  for (int attempt = 0; !lost && attempt < 3; ++attempt) {
    auto r = dec_->step(replica_, batch);
    if (r) {
      took_step(batch, *r, trace_start, res);
      break;
    }
    res.st = r.error();
    const errc code = res.st.code();
    if (code != errc::peer_failed && code != errc::timeout && code != errc::bad_message && code != errc::cancelled) break;
    lost = !failed_tiles().empty();
    if (!lost) TESSERA_LOG_WARN(info_.name << ": step failed (" << res.st.to_string() << "), running it again");
  }
  if (lost) {
    // A tile of the replica failed (before or during this step): bring it back, then tell the
    // engine its KV is gone so it recomputes what was running. The step itself is not run.
    {
      std::lock_guard lk(mu_);
      for (uint32_t t : failed_tiles())
        if (std::find(lost_.begin(), lost_.end(), t) == lost_.end()) lost_.push_back(t);
    }
    status st = recover();
    res.logits.clear();
    res.samples.clear();
    if (st.ok()) {
      ++recoveries_;
      res = stale_answer();
      TESSERA_LOG_WARN(info_.name << ": replica back after a tile failure; the engine recomputes the running sequences");
    } else {
      res.st = st;
    }
  }
  res.wall_seconds = std::chrono::duration<double>(steady::now() - t0).count();
  return res;
}

namespace {
// Which logits rows of a step were sampled where the LM head is (a later step may take their tokens).
std::vector<bool> sampled_rows(const backends::step_batch& b) {
  std::vector<bool> out;
  for (const auto& s : b.seqs)
    if (s.want_logits) out.push_back(s.sample.has_value());
  return out;
}

// ok, or why `b`'s ids that name the previous step's rows cannot be taken from `prev` (nullptr:
// no previous step, or it failed).
status check_feeds(const backends::step_batch& b, const std::vector<bool>* prev) {
  for (const auto& s : b.seqs)
    for (int32_t t : s.tokens) {
      if (t >= 0) continue;
      const int64_t j = -int64_t{t} - 1;
      if (!prev)
        return status::invalid("sequence " + std::to_string(s.seq_id) + " takes the token of row " + std::to_string(j) +
                               " of the previous step, which did not run on this replica");
      if (j >= static_cast<int64_t>(prev->size()) || !(*prev)[static_cast<size_t>(j)])
        return status::invalid("sequence " + std::to_string(s.seq_id) + " takes the token of row " + std::to_string(j) +
                               " of the previous step, which sampled " + std::to_string(prev->size()) +
                               " rows where the LM head is" + (j < static_cast<int64_t>(prev->size()) ? ", not that one" : ""));
    }
  return ok_status();
}
}  // namespace

void tile_llm_backend::work_pipelined() {
  // Steps in flight on the replica's tiles, oldest first: each step's answer lands in its slot
  // (on the tile group's I/O thread); the tiles run them in the order sent.
  struct slot {
    bool done = false;
    result<tile_step_result> r = status::internal("not answered");
  };
  struct flight {
    job j;
    std::shared_ptr<slot> s;
    steady::time_point t0;
    double trace_start = 0;
  };
  std::deque<flight> flights;
  std::optional<std::vector<bool>> last;  // the sampled rows of the last step sent (none: it failed)
  auto answer_rest = [&](std::deque<flight>& rest, const backends::step_result& before) {
    // The steps after a failed one: taking its samples, they cannot run; the engine recomputes.
    for (auto& g : rest) {
      backends::step_result r;
      r.kv_lost = before.kv_lost;
      r.st = before.kv_lost ? before.st
                            : status{errc::cancelled, info_.name + ": the step before it failed: " + before.st.message()};
      g.j.done(std::move(r));
    }
    rest.clear();
  };
  for (;;) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] {
      return stopping_ || (!flights.empty() && flights.front().s->done) ||
             (flights.size() < 2 && !jobs_.empty() && lost_.empty()) || (flights.empty() && !lost_.empty());
    });
    if (stopping_) {
      // Answers already on their way land in slots this thread owns: wait for them.
      cv_.wait(lk, [&] { return std::all_of(flights.begin(), flights.end(), [](const flight& f) { return f.s->done; }); });
      lk.unlock();
      for (auto& f : flights) {
        backends::step_result r;
        r.st = status{errc::cancelled, "backend " + info_.name + " stopped"};
        f.j.done(std::move(r));
      }
      return;
    }
    if (!flights.empty() && flights.front().s->done) {
      flight f = std::move(flights.front());
      flights.pop_front();
      lk.unlock();
      backends::step_result res;
      if (f.s->r) {
        took_step(f.j.batch, *f.s->r, f.trace_start, res);
        res.wall_seconds = std::chrono::duration<double>(steady::now() - f.t0).count();
        f.j.done(std::move(res));
        continue;
      }
      // It failed: let the steps sent after it end (they took its samples), then run it again
      // alone as the synchronous path does (again, or recover the replica), and the rest after it.
      lk.lock();
      cv_.wait(lk, [&] { return std::all_of(flights.begin(), flights.end(), [](const flight& g) { return g.s->done; }); });
      std::deque<flight> rest = std::move(flights);
      flights.clear();
      lk.unlock();
      const status err = f.s->r.error();
      const errc code = err.code();
      const bool again = code == errc::peer_failed || code == errc::timeout || code == errc::bad_message || code == errc::cancelled;
      if (again) {
        TESSERA_LOG_WARN(info_.name << ": step failed (" << err.to_string() << "), running it again");
        res = run_job(f.j.batch, !failed_tiles().empty());
      } else {
        res.st = err;
      }
      const bool ok = res.st.ok();
      last = ok ? std::optional(sampled_rows(f.j.batch)) : std::nullopt;
      backends::step_result before;  // what f was answered decides the rest: recompute (kv_lost) or fail
      before.st = res.st;
      before.kv_lost = res.kv_lost;
      f.j.done(std::move(res));
      if (!ok) {
        answer_rest(rest, before);
        continue;
      }
      for (auto& g : rest) {  // in order, each after the one it takes its samples from
        auto st = check_feeds(g.j.batch, last ? &*last : nullptr);
        auto r = st.ok() ? run_job(g.j.batch, false) : backends::step_result{.st = st};
        last = r.st.ok() ? std::optional(sampled_rows(g.j.batch)) : std::nullopt;
        g.j.done(std::move(r));
      }
      continue;
    }
    if (flights.size() < 2 && !jobs_.empty() && lost_.empty()) {
      job j = std::move(jobs_.front());
      jobs_.pop_front();
      const bool stale = std::exchange(kv_stale_, false);
      lk.unlock();
      if (stale) {
        last.reset();
        j.done(stale_answer());
        continue;
      }
      if (auto st = check_feeds(j.batch, last ? &*last : nullptr); !st.ok()) {
        last.reset();
        backends::step_result r;
        r.st = st;
        j.done(std::move(r));
        continue;
      }
      last = sampled_rows(j.batch);
      auto s = std::make_shared<slot>();
      flight f{std::move(j), s, steady::now(), cfg_.trace ? cfg_.trace->now() : 0};
      lk.lock();
      if (!flights.empty()) ++overlapped_;
      flights.push_back(std::move(f));
      const backends::step_batch& batch = flights.back().j.batch;  // stays put: a deque grows at its ends
      lk.unlock();
      // Not under mu_: a tile known failed answers at once, on this thread.
      dec_->submit_step(replica_, batch, [this, s](result<tile_step_result> r) {
        std::lock_guard g(mu_);
        s->r = std::move(r);
        s->done = true;
        cv_.notify_all();
      });
      continue;
    }
    if (flights.empty() && !lost_.empty()) {
      last.reset();
      if (jobs_.empty()) {
        lk.unlock();
        recover_idle();
        continue;
      }
      job j = std::move(jobs_.front());
      jobs_.pop_front();
      kv_stale_ = false;
      lk.unlock();
      j.done(run_job(j.batch, true));  // recovers, answers kv_lost
    }
  }
}

}  // namespace tessera::host
