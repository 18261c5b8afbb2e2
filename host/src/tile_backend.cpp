// host::tile_backend: replicas as workers over one queue, and the supervisor that brings failed
// replicas back. See tile_backend.hpp.
#include "tessera/host/tile_backend.hpp"

#include "tessera/common/log.hpp"

#include <algorithm>

namespace tessera::host {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

models::packed_batch to_packed(const backends::batch_request& req, int* real) {
  models::packed_batch b;
  for (const auto& s : req.sequences) b.append(s.token_ids, s.token_type_ids);
  *real = b.num_seqs();
  if (req.layout == backends::batch_layout::padded) {
    std::vector<int32_t> filler;
    for (const auto& s : req.sequences) {
      const int missing = req.padded_length - static_cast<int>(s.token_ids.size());
      if (missing <= 0) continue;
      filler.assign(static_cast<size_t>(missing), 0);  // [PAD]
      b.append(filler);
    }
  }
  return b;
}

tile_backend::tile_backend(std::unique_ptr<tile_model> model, std::string name, tile_backend_config cfg)
    : model_(std::move(model)), cfg_(cfg) {
  cfg_.max_attempts = std::max(1, cfg_.max_attempts);
  const auto& c = model_->compiled();
  info_.name = std::move(name);
  info_.kind = "tiles";
  info_.max_sequence_length = c.config.max_sequence_length();
  info_.token_budget = c.token_budget;
  info_.max_batch_sequences = c.max_sequences;
  info_.num_labels = c.output_width();
  if (cfg_.preset) tensors_ = tensors_of(c);
  replicas_.resize(static_cast<size_t>(c.chosen.replicas));
  for (int r = 0; r < c.chosen.replicas; ++r) replicas_[r].tiles = model_->replica_tiles(r);
  // A tile that already failed (between deploy and now) takes its replica out at once.
  for (const auto& t : model_->group().tiles())
    if (t.failed)
      if (int r = replica_of(t.id); r >= 0) mark_down(r, "tile " + std::to_string(t.id) + " failed: " + t.failure);
  model_->group().on_event([this](const tile_event& ev) { on_tile_event(ev); });
  for (int r = 0; r < c.chosen.replicas; ++r) workers_.emplace_back([this, r] { work(r); });
  for (int r = 0; r < c.chosen.replicas; ++r) recoverers_.emplace_back([this, r] { recover_loop(r); });
  supervisor_ = std::thread([this] { supervise(); });
}

tile_backend::~tile_backend() { stop(); }

int tile_backend::replica_of(uint32_t tile) const {
  for (size_t r = 0; r < replicas_.size(); ++r)
    for (uint32_t t : replicas_[r].tiles)
      if (t == tile) return static_cast<int>(r);
  return -1;
}

bool tile_backend::healthy() const {
  std::lock_guard lk(mu_);
  if (stopping_) return false;
  for (const auto& r : replicas_)
    if (r.st == state::up) return true;
  return false;
}

std::vector<backends::replica_status> tile_backend::replicas() const {
  const auto tiles = model_->group().tiles();
  std::lock_guard lk(mu_);
  std::vector<backends::replica_status> out;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const auto& r = replicas_[i];
    backends::replica_status s;
    s.index = static_cast<int>(i);
    s.state = r.st == state::up ? "up" : r.st == state::down ? "down" : "recovering";
    if (r.st != state::up) s.detail = r.why;
    s.tiles = r.tiles;
    for (uint32_t t : r.tiles) {
      s.pids.push_back(tiles[t].failed ? 0 : tiles[t].pid);
      s.incarnations.push_back(tiles[t].incarnation);
    }
    s.recoveries = r.recoveries;
    s.last_recovery_seconds = r.last_recovery_seconds;
    out.push_back(std::move(s));
  }
  return out;
}

void tile_backend::mark_down(int r, const std::string& why) {
  auto& rep = replicas_[static_cast<size_t>(r)];
  if (rep.st != state::up) return;
  rep.st = state::down;
  rep.why = why;
  rep.down_since = steady::now();
  TESSERA_LOG_WARN(info_.name << " replica " << r << " out of rotation: " << why);
  supervisor_cv_.notify_all();
}

// Runs on the tile group's I/O thread: record and return.
void tile_backend::on_tile_event(const tile_event& ev) {
  std::lock_guard lk(mu_);
  const int r = replica_of(ev.tile);
  if (r < 0) return;
  if (ev.what == tile_event::kind::failed) {
    auto& lost = replicas_[static_cast<size_t>(r)].lost;
    if (std::find(lost.begin(), lost.end(), ev.tile) == lost.end()) lost.push_back(ev.tile);
    mark_down(r, "tile " + std::to_string(ev.tile) + " failed: " + ev.why);
  }
  supervisor_cv_.notify_all();  // a registration may be what a waiting recovery needs
}

void tile_backend::submit(backends::batch_request request, std::function<void(backends::batch_result)> done) {
  int64_t tokens = 0;
  for (const auto& s : request.sequences) tokens += static_cast<int64_t>(s.token_ids.size());
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      outstanding_ += tokens;
      jobs_.push_back({std::move(request), std::move(done), tokens, 0, steady::now()});
      // Every worker: they share one condition variable and a worker whose replica is down
      // ignores the wake-up, so notify_one could pick it and leave the job queued with a free
      // replica up (the 504s after a lost replica: the job waited for the next notify, i.e. until
      // the lost replica came back or the request's deadline passed).
      work_cv_.notify_all();
      return;
    }
  }
  backends::batch_result r;
  r.batch_id = request.batch_id;
  r.st = status{errc::cancelled, "backend " + info_.name + " is stopping"};
  done(std::move(r));
}

void tile_backend::answer(job& j, backends::batch_result r) {
  outstanding_ -= j.tokens;
  auto done = std::move(j.done);
  j.done = nullptr;
  if (done) done(std::move(r));
}

void tile_backend::stop() {
  std::deque<job> left;
  {
    std::lock_guard lk(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    left.swap(jobs_);
  }
  work_cv_.notify_all();
  supervisor_cv_.notify_all();
  for (auto& j : left) {
    backends::batch_result r;
    r.batch_id = j.request.batch_id;
    r.st = status{errc::cancelled, "backend " + info_.name + " stopped"};
    answer(j, std::move(r));
  }
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  workers_.clear();
  for (auto& t : recoverers_)
    if (t.joinable()) t.join();
  recoverers_.clear();
  if (supervisor_.joinable()) supervisor_.join();
  model_->group().on_event(nullptr);
}

backends::batch_result tile_backend::run_once(int replica, const backends::batch_request& req) {
  backends::batch_result out;
  out.batch_id = req.batch_id;
  out.num_labels = info_.num_labels;
  // /embed_all: the head tile also sends every token's last-layer row (packed, no padding rows)
  // for this batch; the sequences that asked get theirs, the others their pooled vector.
  const bool token_rows = std::any_of(req.sequences.begin(), req.sequences.end(),
                                      [](const backends::sequence_input& s) { return s.every_token; });
  if (token_rows && model_->compiled().config.num_labels != 0) {
    out.st = status::invalid(info_.name + ": every token's vector is for embedding models; this one is a classifier");
    return out;
  }
  int real = 0;
  models::packed_batch b = to_packed(req, &real);
  // Filler sequences can push a padded batch past the budget: run it in budget-sized pieces.
  std::vector<float> logits, rows;
  int first = 0;
  while (first < b.num_seqs()) {
    int count = 0;
    int64_t tokens = 0;
    while (first + count < b.num_seqs() && count < model_->compiled().max_sequences &&
           tokens + b.seq_len(first + count) <= model_->compiled().token_budget)
      tokens += b.seq_len(first + count++);
    if (count == 0) {
      out.st = status::invalid("a sequence is longer than the token budget");
      return out;
    }
    // The real sequences' tokens in this piece (a padded batch's filler rows stay on the tile).
    int64_t wanted = 0;
    if (token_rows)
      for (int i = first; i < std::min(first + count, real); ++i) wanted += b.seq_len(i);
    auto r = model_->run(replica, b.slice(first, count), wanted);
    if (!r) {
      out.st = r.error();
      return out;
    }
    logits.insert(logits.end(), r->logits.begin(), r->logits.end());
    rows.insert(rows.end(), r->token_rows.begin(), r->token_rows.end());
    if (cfg_.preset) {  // the piece on the modelled chip (a timing failure leaves it unmodelled: 0)
      const auto& c = model_->compiled();
      std::vector<int32_t> lengths;
      for (int i = first; i < first + count; ++i) lengths.push_back(b.seq_len(i));
      program_timing_options opt;
      opt.emulated_tiles = c.chosen.tiles();
      if (auto m = time_program(c.programs[static_cast<size_t>(replica)], tensors_, lengths, *cfg_.preset, opt))
        out.timing.modelled_seconds += m->total_seconds;
    }
    out.timing.wall_seconds += r->wall_seconds;
    out.timing.supersteps += r->supersteps;
    out.timing.bytes_exchanged += static_cast<int64_t>(r->bytes_exchanged);
    first += count;
  }
  const size_t width = static_cast<size_t>(info_.num_labels);
  logits.resize(static_cast<size_t>(real) * width);
  if (!token_rows) {
    out.logits = std::move(logits);
    return out;
  }
  // Per sequence in order: its token rows (every_token) or its pooled row. The real sequences
  // come first in the packed batch (a padded batch's filler follows them), so sequence s's rows
  // start at its offset.
  for (int s = 0; s < real; ++s) {
    const auto& q = req.sequences[static_cast<size_t>(s)];
    if (q.every_token) {
      const size_t at = static_cast<size_t>(b.seq_offsets[static_cast<size_t>(s)]) * width;
      out.logits.insert(out.logits.end(), rows.begin() + static_cast<std::ptrdiff_t>(at),
                        rows.begin() + static_cast<std::ptrdiff_t>(at + q.token_ids.size() * width));
    } else {
      out.logits.insert(out.logits.end(), logits.begin() + static_cast<std::ptrdiff_t>(s * width),
                        logits.begin() + static_cast<std::ptrdiff_t>((s + 1) * width));
    }
  }
  return out;
}

void tile_backend::work(int r) {
  auto& self = replicas_[static_cast<size_t>(r)];
  for (;;) {
    job j;
    {
      std::unique_lock lk(mu_);
      work_cv_.wait(lk, [&] { return stopping_ || (self.st == state::up && !jobs_.empty()); });
      if (stopping_) return;  // stop() answers what is queued
      j = std::move(jobs_.front());
      jobs_.pop_front();
    }
    backends::batch_result res = run_once(r, j.request);
    const errc code = res.st.code();
    const bool retryable = code == errc::peer_failed || code == errc::timeout || code == errc::bad_message ||
                           code == errc::cancelled;
    if (res.st.ok() || !retryable) {
      if (!res.st.ok()) TESSERA_LOG_WARN("batch " << j.request.batch_id << " failed on replica " << r << ": " << res.st.to_string());
      answer(j, std::move(res));
      continue;
    }
    ++j.attempts;
    bool give_up = false;
    {
      std::lock_guard lk(mu_);
      // A failed tile of this replica takes the replica out until the supervisor brings it back.
      for (const auto& t : model_->group().tiles())
        if (t.failed && replica_of(t.id) == r) mark_down(r, "tile " + std::to_string(t.id) + " failed: " + t.failure);
      give_up = stopping_ || j.attempts >= cfg_.max_attempts;
      if (!give_up) {
        TESSERA_LOG_WARN("batch " << j.request.batch_id << " attempt " << j.attempts << " failed on replica " << r
                                  << " (" << res.st.to_string() << "); running it again");
        ++retries_;
        jobs_.push_front(std::move(j));  // first in line for the next replica that is up
        work_cv_.notify_all();
      }
    }
    if (give_up) {
      res.st = res.st.with_context("after " + std::to_string(j.attempts) + " attempts");
      answer(j, std::move(res));
    }
  }
}

status bring_back_tile(tile_group& group, uint32_t t, const std::function<status(uint32_t)>& restore,
                       const std::string& name) {
  const auto t0 = steady::now();
  status st;
  if (group.tiles()[t].failed)
    st = group.can_restart() ? group.restart_tile(t) : group.await_return(t, 200ms);
  else if (!group.can_restart())
    st = group.await_return(t, 0ms);  // back already: hand out the directory with its endpoint
  const auto t1 = steady::now();
  const uint32_t incarnation = group.tiles()[t].incarnation;
  if (st.ok()) st = restore(t);
  if (st.ok() && group.tiles()[t].incarnation != incarnation)
    st = status::peer_failed("tile " + std::to_string(t) + " was replaced while its shards were restored");
  if (st.ok())
    TESSERA_LOG_INFO(name << " tile " << t << ": restarted in "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()
                          << " ms, shards and program restored in "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t1).count() << " ms");
  return st;
}

bool tile_backend::recover(int r) {
  auto& group = model_->group();
  // Every tile that failed since its last restore: an external tile may be registered again
  // (a new incarnation, no shards yet) before this runs.
  std::vector<uint32_t> failed;
  {
    std::lock_guard lk(mu_);
    failed = replicas_[static_cast<size_t>(r)].lost;
  }
  for (const auto& t : group.tiles())
    if (t.failed && replica_of(t.id) == r && std::find(failed.begin(), failed.end(), t.id) == failed.end())
      failed.push_back(t.id);
  for (uint32_t t : failed) {
    status st = bring_back_tile(group, t, [this](uint32_t tile) { return model_->restore_tile(tile); }, info_.name);
    if (st.ok()) {
      std::lock_guard lk(mu_);
      auto& lost = replicas_[static_cast<size_t>(r)].lost;
      lost.erase(std::remove(lost.begin(), lost.end(), t), lost.end());
    }
    if (!st.ok()) {
      std::lock_guard lk(mu_);
      replicas_[static_cast<size_t>(r)].why = "tile " + std::to_string(t) + ": " + st.message() +
                                              (group.can_restart() ? "" : " (waiting for its launcher to start it again)");
      if (group.can_restart() || st.code() != errc::timeout) TESSERA_LOG_WARN(info_.name << " replica " << r << " recovery: " << st.message());
      return false;
    }
  }
  for (const auto& t : group.tiles())
    if (t.failed && replica_of(t.id) == r) return false;  // another tile failed meanwhile: go again
  return true;
}

// One recovery thread per replica: replicas that fail together come back in parallel.
void tile_backend::recover_loop(int r) {
  auto& rep = replicas_[static_cast<size_t>(r)];
  std::unique_lock lk(mu_);
  for (;;) {
    supervisor_cv_.wait(lk, [&] { return stopping_ || rep.st == state::down; });
    if (stopping_) return;
    rep.st = state::recovering;
    lk.unlock();
    const bool back = recover(r);
    lk.lock();
    if (stopping_) return;
    if (back) {
      rep.st = state::up;
      rep.why.clear();
      rep.recoveries += 1;
      rep.last_recovery_seconds = std::chrono::duration<double>(steady::now() - rep.down_since).count();
      last_recovery_seconds_ = rep.last_recovery_seconds;
      ++recoveries_;
      TESSERA_LOG_WARN(info_.name << " replica " << r << " back in rotation after "
                                  << static_cast<int>(rep.last_recovery_seconds * 1e3) << " ms");
      work_cv_.notify_all();
      continue;
    }
    rep.st = state::down;
    // Local tiles: try again soon (a kill during the restart). Remote: await_return waited already.
    if (model_->group().can_restart()) supervisor_cv_.wait_for(lk, 50ms, [&] { return stopping_; });
  }
}

// Batches waiting while no replica is up must not wait forever.
void tile_backend::supervise() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    supervisor_cv_.wait_for(lk, 100ms);
    if (stopping_) break;
    bool any_up = false;
    for (const auto& rep : replicas_) any_up |= rep.st == state::up;
    if (any_up) continue;
    const auto now = steady::now();
    std::deque<job> expired;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (now - it->queued > cfg_.max_wait_for_replica) {
        expired.push_back(std::move(*it));
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    lk.unlock();
    for (auto& j : expired) {
      backends::batch_result res;
      res.batch_id = j.request.batch_id;
      res.st = status::peer_failed(info_.name + ": no replica came back within " +
                                   std::to_string(cfg_.max_wait_for_replica.count()) + " ms");
      answer(j, std::move(res));
    }
    lk.lock();
  }
}

}  // namespace tessera::host
