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
  for (;;) {
    job j;
    bool lost = false;
    bool stale = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !jobs_.empty() || !lost_.empty(); });
      if (stopping_) return;  // stop() answers what is queued
      if (jobs_.empty()) {
        // A tile failed while the replica had no step: bring it back now rather than at the next
        // step (the router sends new requests elsewhere meanwhile, recovering()). Its KV is gone:
        // the next step answers kv_lost so the engine recomputes and forgets its prefix cache.
        lk.unlock();
        status st = recover();
        lk.lock();
        if (st.ok()) {
          ++recoveries_;
          kv_stale_ = true;
          TESSERA_LOG_WARN(info_.name << ": replica back after a tile failure while idle");
        } else if (!stopping_) {
          TESSERA_LOG_WARN(info_.name << ": " << st.message() << "; trying again");
          cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stopping_; });
        }
        continue;
      }
      j = std::move(jobs_.front());
      jobs_.pop_front();
      lost = !lost_.empty();
      stale = std::exchange(kv_stale_, false);
    }
    backends::step_result res;
    const auto t0 = steady::now();
    if (stale) {
      res.st = status::peer_failed(info_.name + ": a tile failed and was brought back; its KV cache is empty");
      res.kv_lost = true;
      res.wall_seconds = std::chrono::duration<double>(steady::now() - t0).count();
      j.done(std::move(res));
      continue;
    }
    auto failed_tiles = [&] {
      std::vector<uint32_t> out;
      for (const auto& t : dec_->group().tiles())
        if (t.failed && std::find(tiles_.begin(), tiles_.end(), t.id) != tiles_.end()) out.push_back(t.id);
      return out;
    };
    // A step that fails without a failed tile (a lost slice, an exchange timeout) runs again: its
    // new positions' K/V are written again, earlier ones were not touched.
    const double trace_start = cfg_.trace ? cfg_.trace->now() : 0;
    for (int attempt = 0; !lost && attempt < 3; ++attempt) {
      auto r = dec_->step(replica_, j.batch);
      if (r) {
        if (cfg_.trace && shared_->traced.fetch_add(1) < cfg_.max_traced_steps) trace(j.batch, *r, trace_start);
        res.st = ok_status();
        res.logits = std::move(r->logits);
        res.samples = std::move(r->samples);
        ++steps_;
        supersteps_ += r->supersteps;
        res.compute_seconds = r->busiest_compute_seconds;
        bytes_ += r->bytes_exchanged;
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
        res.st = status::peer_failed(info_.name + ": a tile failed and was brought back; its KV cache is empty");
        res.kv_lost = true;
        TESSERA_LOG_WARN(info_.name << ": replica back after a tile failure; the engine recomputes the running sequences");
      } else {
        res.st = st;
      }
    }
    res.wall_seconds = std::chrono::duration<double>(steady::now() - t0).count();
    j.done(std::move(res));
  }
}

}  // namespace tessera::host
