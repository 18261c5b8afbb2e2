// host::tile_group over one control channel (exchange/channel.hpp). See tile_group.hpp.
#include "tessera/host/tile_group.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <set>

#include "tessera/common/log.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/exchange/zmq_transport.hpp"

namespace tessera::host {

using namespace tessera::exchange;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {
std::string join_ids(const std::vector<uint32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}
std::string route_of(uint32_t tile, uint32_t incarnation) {
  return "tile-" + std::to_string(tile) + "-" + std::to_string(incarnation);
}
constexpr auto abort_grace = 2s;  // survivors of a failed batch answer the abort within this
// A shutdown whose reason starts so tells a fenced incarnation to exit with status 1 (a failure,
// so its launcher starts the next one); tile_daemon.cpp reads the same prefix.
constexpr const char* fenced_reason = "fenced: ";
}  // namespace

tile_group::tile_group(tile_group_config cfg) : cfg_(std::move(cfg)) {
  tiles_.resize(cfg_.tiles);
  routes_.resize(cfg_.tiles);
  for (uint32_t i = 0; i < cfg_.tiles; ++i) tiles_[i].id = i;
}

result<std::unique_ptr<tile_group>> tile_group::start(tile_group_config cfg) {
  if (cfg.tiles == 0 || cfg.tiles > max_tiles)
    return status::invalid("a tile group needs 1.." + std::to_string(max_tiles) + " tiles, not " +
                           std::to_string(cfg.tiles));
  std::unique_ptr<tile_group> g(new tile_group(std::move(cfg)));
  TESSERA_RETURN_IF_ERROR(g->bind_and_launch());
  if (auto st = g->await_registration(); !st.ok()) {
    g->shutdown();
    return st;
  }
  TESSERA_RETURN_IF_ERROR(g->send_directory());
  return g;
}

tile_group::~tile_group() { shutdown(); }

status tile_group::bind_and_launch() {
  channel::options o;
  o.name = "tile control";
  o.type = zmq::socket_type::router;
  o.bind = cfg_.control_bind;
  o.tick = 10ms;
  o.configure = [this](zmq::socket_t& s) { exchange::secure_server(ctx_, s); };  // CurveZMQ + ZAP when keys are loaded
  channel::handlers h;
  h.reply_id = [](const envelope& e) { return peek_request_id(e); };
  h.on_message = [this](const std::string& peer, envelope&& e) { on_message(peer, std::move(e)); };
  h.on_tick = [this](steady::time_point now) { on_tick(now); };
  h.on_disconnect = [this](const std::string& peer) {
    std::lock_guard lk(mu_);
    for (auto& t : tiles_)
      if (t.registered && !t.failed && routes_[t.id] == peer) t.disconnected_at = steady::now();
  };
  auto ch = channel::open(ctx_, std::move(o), std::move(h));
  if (!ch)
    return status::io_error("cannot bind the host's control socket at " + cfg_.control_bind + ": " +
                            ch.error().message() + "; choose another --control address or port");
  channel_ = std::move(*ch);
  channel_->start();
  control_endpoint_ = channel_->endpoint();
  if (!cfg_.advertise_host.empty() && control_endpoint_.rfind("tcp://", 0) == 0)
    control_endpoint_ = "tcp://" + cfg_.advertise_host + control_endpoint_.substr(control_endpoint_.rfind(':'));
  if (!cfg_.launch_local) return ok_status();

  char tmpl[] = "/tmp/tessera-XXXXXX";
  if (!mkdtemp(tmpl)) return status::io_error("cannot create a run directory under /tmp");
  run_dir_ = tmpl;
  launcher_ = std::make_unique<local_launcher>(cfg_.launcher);
  std::lock_guard lk(mu_);
  for (uint32_t i = 0; i < cfg_.tiles; ++i) TESSERA_RETURN_IF_ERROR(spawn_tile(i));
  return ok_status();
}

status tile_group::spawn_tile(uint32_t i) {
  std::string bind = cfg_.local_exchange == "tcp" ? "tcp://127.0.0.1:0"
                                                  : "ipc://" + run_dir_ + "/tile-" + std::to_string(i) + ".sock";
  std::vector<std::string> args{"--host", control_endpoint_, "--tile-id", std::to_string(i),
                                "--incarnation", std::to_string(tiles_[i].incarnation),
                                "--memory", std::to_string(cfg_.tile_memory), "--exchange-bind", bind,
                                "--heartbeat-ms", std::to_string(cfg_.heartbeat_interval.count()),
                                "--exchange-timeout-ms", std::to_string(cfg_.exchange_timeout.count())};
  args.insert(args.end(), cfg_.extra_tile_args.begin(), cfg_.extra_tile_args.end());
  auto pid = launcher_->spawn(args, i);
  if (!pid) return pid.error();
  tiles_[i].pid = *pid;
  tiles_[i].local = true;
  return ok_status();
}

status tile_group::await_registration() {
  std::unique_lock lk(mu_);
  auto deadline = steady::now() + cfg_.register_timeout;
  bool all = changed_.wait_until(lk, deadline, [&] {
    for (const auto& t : tiles_)
      if (!t.registered && !t.failed) return false;
    return true;
  });
  std::vector<uint32_t> missing, failed;
  std::string failures;
  for (const auto& t : tiles_) {
    if (t.failed) {
      failed.push_back(t.id);
      failures += "; tile " + std::to_string(t.id) + ": " + t.failure;
    } else if (!t.registered) {
      missing.push_back(t.id);
    }
  }
  if (!failed.empty()) return status::peer_failed("tiles " + join_ids(failed) + " failed to start" + failures);
  if (!all || !missing.empty())
    return status::timeout("tiles " + join_ids(missing) + " did not register within " +
                           std::to_string(cfg_.register_timeout.count()) + " ms at " + control_endpoint_ +
                           "; start them with --host " + control_endpoint_ + " and check that this address is reachable");
  return ok_status();
}

status tile_group::send_directory() {
  peer_directory dir;
  std::vector<std::string> to;
  {
    std::lock_guard lk(mu_);
    for (const auto& t : tiles_) {
      dir.endpoints.push_back(t.exchange_endpoint);
      dir.incarnations.push_back(t.incarnation);
    }
    for (uint32_t i = 0; i < cfg_.tiles; ++i)
      if (tiles_[i].registered && !tiles_[i].failed) to.push_back(routes_[i]);
  }
  // The channel keeps per-peer order: a tile reads the directory before any later request.
  for (const auto& r : to) channel_->send(r, encode(dir));
  return ok_status();
}

// ---- I/O thread ----

void tile_group::on_message(const std::string& identity, envelope&& e) {
  auto type = peek_type(e);
  auto bad = [&](const std::string& why) {
    ++bad_messages_;
    TESSERA_LOG_WARN("dropped a control message: " << why);
  };
  if (!type) return bad(type.error().message());
  switch (*type) {
    case msg_type::register_tile: {
      register_tile m;
      if (auto st = decode(e, m); !st.ok()) return bad(st.message());
      if (m.tile_id >= cfg_.tiles) return bad("register from tile " + std::to_string(m.tile_id) + ", group has " +
                                              std::to_string(cfg_.tiles));
      if (identity != route_of(m.tile_id, m.incarnation))
        return bad("register whose socket identity '" + identity + "' does not match tile " + std::to_string(m.tile_id));
      uint32_t replaced = 0;
      bool replaces = false;
      {
        std::lock_guard lk(mu_);
        auto& t = tiles_[m.tile_id];
        if (m.incarnation < t.incarnation || (t.registered && m.incarnation == t.incarnation && !t.failed))
          return bad("stale or duplicate register for tile " + std::to_string(m.tile_id) + " incarnation " +
                     std::to_string(m.incarnation));
        if (t.local && m.incarnation != t.incarnation)
          return bad("register of tile " + std::to_string(m.tile_id) + " incarnation " + std::to_string(m.incarnation) +
                     ", but this host launched incarnation " + std::to_string(t.incarnation));
        // A launcher may start a dead tile again before its silence is noticed: the old
        // incarnation fails first, so its replica goes through recovery (shards, program).
        replaces = t.registered && !t.failed;
        replaced = t.incarnation;
      }
      if (replaces)
        mark_failed(m.tile_id, "incarnation " + std::to_string(m.incarnation) + " registered in place of incarnation " +
                                   std::to_string(replaced));
      {
        std::lock_guard lk(mu_);
        auto& t = tiles_[m.tile_id];
        if (m.incarnation != t.incarnation) t.injected = {};
        t.registered = true;
        t.failed = false;
        t.failure.clear();
        t.incarnation = m.incarnation;
        t.hostname = m.hostname;
        t.exchange_endpoint = m.exchange_endpoint;
        t.memory_capacity = m.memory_capacity;
        t.memory_used = t.memory_high_water = 0;
        if (!t.local) t.pid = m.pid;
        t.last_heartbeat = steady::now();
        t.disconnected_at = {};
        routes_[m.tile_id] = identity;
      }
      changed_.notify_all();
      TESSERA_LOG_DEBUG("tile " << m.tile_id << " registered from " << m.hostname << " at " << m.exchange_endpoint);
      emit({tile_event::kind::registered, m.tile_id, m.incarnation, {}});
      return;
    }
    case msg_type::heartbeat: {
      heartbeat m;
      if (auto st = decode(e, m); !st.ok()) return bad(st.message());
      if (m.tile_id >= cfg_.tiles) return bad("heartbeat from unknown tile " + std::to_string(m.tile_id));
      std::unique_lock lk(mu_);
      auto& t = tiles_[m.tile_id];
      if (m.incarnation != t.incarnation || t.failed) {  // an old incarnation, or one declared failed
        ++stale_heartbeats_;
        // Fenced: it never serves again. Tell it to go (once a second at most) rather than leave it
        // to notice the host's silence (--host-silence-ms, 15 s): it exits with status 1 and its
        // launcher starts the next incarnation at once (a partition healed: back in ~3 s, not ~20).
        if (m.incarnation < t.incarnation || (m.incarnation == t.incarnation && t.failed)) {
          const std::string route = route_of(m.tile_id, m.incarnation);
          const auto now = steady::now();
          auto& last = fenced_told_[route];
          if (now - last >= 1s) {
            last = now;
            const std::string why = t.failed && m.incarnation == t.incarnation ? t.failure
                                    : "incarnation " + std::to_string(t.incarnation) + " replaced it";
            lk.unlock();
            ++fenced_shutdowns_;
            TESSERA_LOG_WARN("tile " << m.tile_id << " incarnation " << m.incarnation
                                     << " is fenced and still alive: told to exit (" << why << ")");
            (void)channel_->send_now(route, encode(exchange::shutdown{std::string(fenced_reason) + why}));
          }
        }
        return;
      }
      t.last_heartbeat = steady::now();
      t.memory_used = m.memory_used;
      t.memory_high_water = m.memory_high_water;
      t.bad_messages = m.bad_messages;
      t.stale_messages = m.stale_messages;
      t.injected = m.injected;
      return;
    }
    case msg_type::ack:
    case msg_type::run_done:
      // A reply nobody waits for any more: its request timed out, or its tile was declared
      // failed (an old incarnation's last words).
      ++late_replies_;
      TESSERA_LOG_DEBUG("late " << msg_type_name(*type) << " from " << identity << " dropped");
      return;
    default:
      return bad("unexpected " + std::string(msg_type_name(*type)) + " at the host");
  }
}

void tile_group::on_tick(steady::time_point now) {
  std::vector<std::pair<uint32_t, std::string>> failures;
  // Tiles started elsewhere may exit when the host falls silent (--host-silence-ms): an idle
  // host tells them every second that it is alive.
  const bool keepalive = now - last_keepalive_ >= 1s;
  std::vector<std::pair<std::string, exchange::heartbeat>> alive;
  {
    std::lock_guard lk(mu_);
    if (shut_) return;
    if (keepalive) {
      last_keepalive_ = now;
      for (const auto& t : tiles_)
        if (!t.local && t.registered && !t.failed) alive.push_back({routes_[t.id], {t.id, t.incarnation}});
    }
    for (auto& t : tiles_) {
      if (t.failed) continue;
      if (t.local && t.pid > 0 && launcher_) {
        if (auto why = launcher_->poll_exit(t.pid)) {
          t.pid = 0;
          failures.push_back({t.id, "process " + *why});
          continue;
        }
      }
      if (t.registered && t.disconnected_at > t.last_heartbeat && now - t.disconnected_at > cfg_.disconnect_grace) {
        failures.push_back(
            {t.id, "control connection closed, nothing heard for " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t.disconnected_at).count()) +
                       " ms (grace " + std::to_string(cfg_.disconnect_grace.count()) + " ms)"});
        continue;
      }
      if (t.registered && now - t.last_heartbeat > cfg_.heartbeat_timeout)
        failures.push_back(
            {t.id, "no heartbeat for " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t.last_heartbeat).count()) +
                       " ms (limit " + std::to_string(cfg_.heartbeat_timeout.count()) + " ms)"});
    }
  }
  // A keepalive that cannot leave: that tile is unreachable, which its silence reports next.
  for (auto& [route, h] : alive) (void)channel_->send_now(route, encode(h));
  for (auto& [tile, why] : failures) mark_failed(tile, why);
}

void tile_group::emit(const tile_event& ev) {
  // Held while the listener runs, so on_event(nullptr) returns only when no call is in flight.
  std::lock_guard lk(listener_mu_);
  if (listener_) listener_(ev);
}

void tile_group::on_event(std::function<void(const tile_event&)> listener) {
  std::lock_guard lk(listener_mu_);
  listener_ = std::move(listener);
}

void tile_group::mark_failed(uint32_t tile, const std::string& why) {
  std::string route;
  uint32_t incarnation = 0;
  {
    std::lock_guard lk(mu_);
    if (tile >= cfg_.tiles || shut_) return;
    auto& t = tiles_[tile];
    if (t.failed) return;
    t.failed = true;
    t.failure = why;
    route = routes_[tile];
    incarnation = t.incarnation;
  }
  TESSERA_LOG_ERROR("tile " << tile << " failed: " << why);
  changed_.notify_all();
  // Every request waiting on it ends now, with the reason (not at its deadline).
  channel_->retire_peer(route, status::peer_failed("tile " + std::to_string(tile) + " failed: " + why));
  emit({tile_event::kind::failed, tile, incarnation, why});
}

// ---- requests (any thread but the I/O thread) ----

result<envelope> tile_group::call(uint32_t tile, uint64_t id, envelope e, std::chrono::milliseconds timeout) {
  std::string route;
  {
    std::lock_guard lk(mu_);
    if (tile >= cfg_.tiles)
      return status::invalid("no tile " + std::to_string(tile) + " in a group of " + std::to_string(cfg_.tiles));
    if (tiles_[tile].failed)
      return status::peer_failed("tile " + std::to_string(tile) + " has failed: " + tiles_[tile].failure);
    route = routes_[tile];
  }
  auto promise = std::make_shared<std::promise<result<envelope>>>();
  auto future = promise->get_future();
  channel_->request(route, id, std::move(e), steady::now() + timeout,
                    [promise](result<envelope> r) { promise->set_value(std::move(r)); });
  return future.get();
}

namespace {
// An ack's status, or the failure that replaced it.
result<std::pair<ack, envelope>> read_ack(result<envelope> r, uint32_t tile) {
  if (!r) return r.error();
  ack a;
  if (auto st = decode(*r, a); !st.ok()) return st.with_context("ack from tile " + std::to_string(tile));
  if (a.code != errc::ok) return status{a.code, a.message};
  return std::make_pair(std::move(a), std::move(*r));
}
}  // namespace

status tile_group::alloc(uint32_t tile, const tensor_desc& desc, const void* data) {
  return alloc_many({{tile, desc, data}});
}

status tile_group::alloc_many(const std::vector<alloc_request>& reqs,
                              const std::function<void(uint64_t, uint64_t)>& progress) {
  uint64_t total = 0, sent = 0;
  for (const auto& r : reqs) total += r.data ? r.desc.bytes() : 0;
  // Keep a bounded window in flight so a large model streams without queueing it all twice.
  constexpr size_t window = 16;
  std::deque<std::pair<std::future<result<envelope>>, uint32_t>> pending;
  status first_error;
  auto drain = [&](size_t keep) {
    while (pending.size() > keep) {
      auto [f, tile] = std::move(pending.front());
      pending.pop_front();
      auto a = read_ack(f.get(), tile);
      if (!a) first_error.update(a.error().with_context("allocating on tile " + std::to_string(tile)));
    }
  };
  for (const auto& r : reqs) {
    std::string route;
    {
      std::lock_guard lk(mu_);
      if (r.tile >= cfg_.tiles) {
        first_error = status::invalid("no tile " + std::to_string(r.tile));
        break;
      }
      if (tiles_[r.tile].failed) {
        first_error = status::peer_failed("tile " + std::to_string(r.tile) + " has failed: " + tiles_[r.tile].failure);
        break;
      }
      route = routes_[r.tile];
    }
    alloc_tensor m{next_id(), r.desc, r.data != nullptr, true};
    zmq::message_t frame = r.data ? copy_frame(r.data, r.desc.bytes()) : zmq::message_t();
    auto promise = std::make_shared<std::promise<result<envelope>>>();
    pending.emplace_back(promise->get_future(), r.tile);
    channel_->request(route, m.request_id, encode(m, std::move(frame)), steady::now() + cfg_.request_timeout,
                      [promise](result<envelope> x) { promise->set_value(std::move(x)); });
    drain(window);
    if (!first_error.ok()) break;
    sent += r.data ? r.desc.bytes() : 0;
    if (progress) progress(sent, total);
  }
  drain(0);
  return first_error;
}

status tile_group::free(uint32_t tile, const std::vector<uint32_t>& ids) {
  free_tensors m{next_id(), ids};
  auto a = read_ack(call(tile, m.request_id, encode(m), cfg_.request_timeout), tile);
  return a ? ok_status() : a.error();
}

status tile_group::load(const std::map<uint32_t, program>& per_tile) {
  std::vector<std::pair<std::future<result<envelope>>, uint32_t>> pending;
  for (const auto& [tile, prog] : per_tile) {
    std::string route;
    {
      std::lock_guard lk(mu_);
      if (tile >= cfg_.tiles) return status::invalid("no tile " + std::to_string(tile));
      if (tiles_[tile].failed)
        return status::peer_failed("tile " + std::to_string(tile) + " has failed: " + tiles_[tile].failure);
      route = routes_[tile];
    }
    load_program m{next_id(), prog};
    auto promise = std::make_shared<std::promise<result<envelope>>>();
    pending.emplace_back(promise->get_future(), tile);
    channel_->request(route, m.request_id, encode(m), steady::now() + cfg_.request_timeout,
                      [promise](result<envelope> x) { promise->set_value(std::move(x)); });
  }
  status first;
  for (auto& [f, tile] : pending) {
    auto a = read_ack(f.get(), tile);
    if (!a) first.update(a.error().with_context("loading the program on tile " + std::to_string(tile)));
  }
  return first;
}

result<std::vector<float>> tile_group::fetch(uint32_t tile, const slice_ref& slice, int64_t active_tokens) {
  fetch_tensor m{next_id(), slice, active_tokens};
  auto a = read_ack(call(tile, m.request_id, encode(m), cfg_.request_timeout), tile);
  if (!a) return a.error();
  auto& payloads = a->second.payloads;
  if (payloads.size() != 1) return status::bad_message("tile " + std::to_string(tile) + " returned no tensor");
  std::vector<float> out(payloads[0].size() / 4);
  std::memcpy(out.data(), payloads[0].data(), payloads[0].size());
  return out;
}

// ---- batches ----

struct tile_group::run_op {
  uint64_t batch = 0;
  uint32_t program_id = 0;
  std::vector<uint32_t> parts;
  std::map<uint32_t, std::string> routes;
  std::map<uint32_t, std::vector<size_t>> outputs_of;  // output j is the k-th frame of its tile
  std::vector<exchange::dtype> output_types;           // per output: how its frame's bytes are read
  std::set<uint32_t> answered;
  size_t remaining = 0;
  status first_error;
  bool aborted = false;
  run_result out;
  steady::time_point t0;
  std::function<void(result<run_result>)> done;
};

result<run_result> tile_group::run(const batch_spec& spec) {
  auto promise = std::make_shared<std::promise<result<run_result>>>();
  auto future = promise->get_future();
  submit(spec, [promise](result<run_result> r) { promise->set_value(std::move(r)); });
  return future.get();
}

void tile_group::submit(const batch_spec& spec, std::function<void(result<run_result>)> done) {
  auto op = std::make_shared<run_op>();
  op->t0 = steady::now();
  op->parts = spec.tiles;
  if (op->parts.empty())
    for (uint32_t i = 0; i < cfg_.tiles; ++i) op->parts.push_back(i);
  {
    std::lock_guard lk(mu_);
    for (uint32_t p : op->parts) {
      if (p >= cfg_.tiles) return done(status::invalid("batch names tile " + std::to_string(p) + ", outside the group"));
      if (tiles_[p].failed)
        return done(status::peer_failed("tile " + std::to_string(p) + " has failed: " + tiles_[p].failure));
      op->routes[p] = routes_[p];
    }
  }
  op->batch = next_id();
  op->program_id = spec.program_id;
  op->out.batch_id = op->batch;
  op->out.outputs.resize(spec.outputs.size());
  op->remaining = op->parts.size();
  op->done = std::move(done);
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    op->outputs_of[spec.outputs[j].tile].push_back(j);
    op->output_types.push_back(spec.outputs[j].type);
  }
  const auto deadline = steady::now() + cfg_.run_timeout;
  std::vector<std::pair<uint32_t, envelope>> sends;
  for (uint32_t p : op->parts) {
    run_program m;
    m.program_id = spec.program_id;
    m.batch_id = op->batch;
    m.seq_lengths = spec.seq_lengths;
    m.active_tokens = spec.active_tokens;
    m.collect_counters = spec.collect_counters;
    std::vector<zmq::message_t> frames;
    for (const auto& in : spec.inputs) {
      if (in.tile != p) continue;
      m.inputs.push_back(in.dst);
      frames.push_back(copy_frame(in.data, in.bytes));
    }
    for (size_t j : op->outputs_of[p]) m.outputs.push_back(spec.outputs[j].src);
    sends.emplace_back(p, encode(m, std::move(frames)));
  }
  // All parts in one go on the I/O thread: once one cannot be sent (its tile's socket is gone
  // before its death was noticed), the batch is aborted and the rest are not sent. Sent, they
  // would wait for the dead tile's slices until the exchange timeout (30 s), and so would the
  // batch's requests before being run again elsewhere.
  auto box = std::make_shared<std::vector<std::pair<uint32_t, envelope>>>(std::move(sends));
  const bool posted = channel_->post([this, op, box, deadline] {
    for (auto& [p, e] : *box) {
      if (op->aborted) {
        finish_part(op, p, status{errc::cancelled, "not sent: batch " + std::to_string(op->batch) + " was aborted"});
        continue;
      }
      channel_->request(op->routes[p], op->batch, std::move(e), deadline,
                        [this, op, p = p](result<envelope> r) { finish_part(op, p, std::move(r)); });
    }
  });
  if (!posted) std::move(op->done)(status{errc::cancelled, "the tile group is shutting down"});
}

void tile_group::finish_part(const std::shared_ptr<run_op>& op, uint32_t p, result<envelope> r) {
  op->answered.insert(p);
  status st;
  if (!r) {
    st = r.error();
    if (st.code() == errc::peer_failed) {  // e.g. its socket is gone: named as the tile's failure
      mark_failed(p, st.message());
      std::lock_guard lk(mu_);
      if (op->routes[p] == routes_[p])
        st = status::peer_failed("tile " + std::to_string(p) + " failed: " + tiles_[p].failure);
    }
    if (st.code() == errc::timeout) {
      // A participant that neither finished nor answered an abort is stuck: it must be restarted.
      const std::string why = op->aborted ? "did not answer an abort of batch " + std::to_string(op->batch)
                                          : "did not finish batch " + std::to_string(op->batch) + " within " +
                                                std::to_string(cfg_.run_timeout.count()) + " ms";
      mark_failed(p, why);
      st = status::timeout("tile " + std::to_string(p) + " " + why);
    }
  } else {
    run_done d;
    if (auto dst = decode(*r, d); !dst.ok()) {
      st = dst.with_context("run_done from tile " + std::to_string(p));
    } else if (d.code != errc::ok) {
      st = status{d.code, "tile " + std::to_string(p) + ": " + d.message};
    } else {
      {
        std::lock_guard lk(mu_);
        auto& t = tiles_[p];
        t.memory_high_water = std::max(t.memory_high_water, d.memory_high_water);
        t.last_heartbeat = steady::now();
        if (op->routes[p] == routes_[p]) t.injected = d.injected;  // not an old incarnation's
      }
      op->out.counters[p] = std::move(d.counters);
      op->out.memory_high_water[p] = d.memory_high_water;
      const auto& mine = op->outputs_of[p];
      auto& frames = r->payloads;
      if (frames.size() != mine.size()) {
        st = status::bad_message("tile " + std::to_string(p) + " returned " + std::to_string(frames.size()) +
                                 " outputs, expected " + std::to_string(mine.size()));
      } else {
        for (size_t k = 0; k < mine.size(); ++k) {
          auto& v = op->out.outputs[mine[k]];
          if (op->output_types[mine[k]] == exchange::dtype::bf16) {
            // A ZeroMQ frame need not be 2-byte aligned: read each value with memcpy (UBSan).
            const auto* h = static_cast<const unsigned char*>(frames[k].data());
            v.resize(frames[k].size() / 2);
            for (size_t i = 0; i < v.size(); ++i) {
              uint16_t half = 0;
              std::memcpy(&half, h + 2 * i, 2);
              const uint32_t u = static_cast<uint32_t>(half) << 16;
              std::memcpy(&v[i], &u, 4);
            }
          } else {
            v.resize(frames[k].size() / 4);
            std::memcpy(v.data(), frames[k].data(), frames[k].size());
          }
        }
      }
    }
  }
  if (!st.ok()) {
    op->first_error.update(st);  // the first failure is the cause; later ones follow from it
    if (!op->aborted) {
      // End the batch for everyone: the survivors would otherwise wait for the failed tile until
      // the exchange timeout. Their answers (or their failure) complete their requests.
      op->aborted = true;
      const auto grace = steady::now() + abort_grace;
      for (uint32_t q : op->parts) {
        if (op->answered.count(q)) continue;
        // Best effort: a part that cannot be told to stop still ends at the deadline set below.
        (void)channel_->send_now(op->routes[q], encode(abort_run{op->program_id, op->batch, "a peer failed: " + st.message()}));
        channel_->set_deadline(op->routes[q], op->batch, grace);
      }
    }
  }
  if (--op->remaining > 0) return;
  auto done = std::move(op->done);
  if (!op->first_error.ok()) {
    std::string prefix = "batch " + std::to_string(op->batch) + " failed: ";
    return done(status{op->first_error.code(), prefix + op->first_error.message()});
  }
  op->out.wall_seconds = std::chrono::duration<double>(steady::now() - op->t0).count();
  done(std::move(op->out));
}

// ---- recovery ----

status tile_group::restart_tile(uint32_t tile) {
  std::unique_lock lk(mu_);
  if (tile >= cfg_.tiles) return status::invalid("no tile " + std::to_string(tile));
  if (!launcher_)
    return status::unsupported("tile " + std::to_string(tile) +
                               " was launched elsewhere; start it again there with a higher --incarnation");
  if (shut_) return status{errc::cancelled, "the tile group is shutting down"};
  auto& t = tiles_[tile];
  const bool was_failed = t.failed;
  const std::string old_route = routes_[tile];
  if (t.pid > 0) {
    ::kill(t.pid, SIGKILL);  // a stalled or half-dead process must not come back
    launcher_->stop(t.pid, 0);
    t.pid = 0;
  }
  const uint32_t next = t.incarnation + 1;
  t.incarnation = next;
  t.registered = false;
  t.failed = false;
  t.failure.clear();
  t.memory_used = t.memory_high_water = 0;
  t.injected = {};
  if (auto st = spawn_tile(tile); !st.ok()) {
    t.failed = true;
    t.failure = "restart failed: " + st.message();
    return st;
  }
  lk.unlock();
  if (!was_failed)  // requests to the old incarnation end now
    channel_->retire_peer(old_route, status::peer_failed("tile " + std::to_string(tile) + " was restarted"));
  lk.lock();
  bool ok = changed_.wait_until(lk, steady::now() + cfg_.register_timeout, [&] {
    return (t.registered && t.incarnation == next) || t.failed || shut_;
  });
  if (!ok || t.failed || !t.registered) {
    std::string why = t.failed ? t.failure : "it did not register within " + std::to_string(cfg_.register_timeout.count()) + " ms";
    lk.unlock();
    if (!ok) mark_failed(tile, why);
    return status::peer_failed("tile " + std::to_string(tile) + " did not come back after a restart: " + why);
  }
  lk.unlock();
  TESSERA_RETURN_IF_ERROR(send_directory());
  ++restarts_;
  TESSERA_LOG_WARN("tile " << tile << " restarted as incarnation " << next);
  return ok_status();
}

status tile_group::await_return(uint32_t tile, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (tile >= cfg_.tiles) return status::invalid("no tile " + std::to_string(tile));
  auto& t = tiles_[tile];
  // A failed tile turns healthy again only by registering with a higher incarnation.
  bool back = changed_.wait_until(lk, steady::now() + timeout, [&] { return shut_ || (t.registered && !t.failed); });
  if (!back || shut_)
    return status::timeout("tile " + std::to_string(tile) + " did not come back within " +
                           std::to_string(timeout.count()) + " ms");
  lk.unlock();
  return send_directory();
}

// ---- snapshots, signals, shutdown ----

std::vector<tile_info> tile_group::tiles() const {
  std::lock_guard lk(mu_);
  return tiles_;
}

status tile_group::health() const {
  std::vector<uint32_t> failed;
  std::string why;
  for (const auto& t : tiles())
    if (t.failed) {
      failed.push_back(t.id);
      why += "; tile " + std::to_string(t.id) + " " + t.failure;
    }
  if (failed.empty()) return ok_status();
  return status::peer_failed("tiles " + join_ids(failed) + " failed" + why);
}

status tile_group::signal_tile(uint32_t tile, int sig) {
  auto snapshot = tiles();
  if (tile >= cfg_.tiles || !snapshot[tile].local || snapshot[tile].pid <= 0)
    return status::invalid("tile " + std::to_string(tile) + " is not a running local tile");
  if (kill(snapshot[tile].pid, sig) != 0) return status::io_error("kill failed");
  return ok_status();
}

void tile_group::shutdown() {
  std::vector<std::string> live;
  {
    std::lock_guard lk(mu_);
    if (shut_) return;
    shut_ = true;
    for (uint32_t i = 0; i < cfg_.tiles; ++i)
      if (tiles_[i].registered && !tiles_[i].failed) live.push_back(routes_[i]);
  }
  changed_.notify_all();
  if (channel_) {
    for (const auto& r : live) channel_->send(r, encode(exchange::shutdown{"host shutdown"}));
    channel_->stop(500ms);  // pending requests end `cancelled`; the shutdown messages leave
  }
  std::lock_guard lk(mu_);
  if (launcher_) {
    // Give tiles a moment to exit on the shutdown message, then make sure.
    auto deadline = steady::now() + 2s;
    for (auto& t : tiles_) {
      while (t.pid > 0 && steady::now() < deadline && !launcher_->poll_exit(t.pid)) std::this_thread::sleep_for(2ms);
      if (t.pid > 0 && !launcher_->poll_exit(t.pid)) launcher_->stop(t.pid, 500);
      t.pid = 0;
    }
  }
  if (!run_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
  }
}

result<barrier_probe> measure_barrier(tile_group& group, int supersteps, int runs) {
  if (supersteps < 1 || runs < 1) return status::invalid("measure_barrier: supersteps and runs must be positive");
  std::vector<uint32_t> all;
  for (uint32_t t = 0; t < group.size(); ++t) all.push_back(t);
  std::map<uint32_t, exchange::program> programs;
  for (uint32_t t : all) {
    exchange::program p;
    p.id = kBarrierProbeProgram;
    p.tiles = all;
    p.steps.resize(static_cast<size_t>(supersteps));  // empty, sync = true: a barrier each
    programs[t] = std::move(p);
  }
  TESSERA_RETURN_IF_ERROR(group.load(programs));
  batch_spec spec;
  spec.program_id = kBarrierProbeProgram;
  spec.collect_counters = true;
  result<run_result> r = status::internal("no run");
  for (int i = 0; i < runs; ++i) {
    r = group.run(spec);
    if (!r) return r.error().with_context("measuring the barrier (" + std::to_string(supersteps) + " empty supersteps)");
  }
  std::vector<double> per_step(static_cast<size_t>(supersteps), 0.0);
  for (const auto& [tile, cs] : r->counters)
    for (size_t s = 0; s < cs.size() && s < per_step.size(); ++s) per_step[s] += double(cs[s].sync_ns) * 1e-9 / double(all.size());
  std::sort(per_step.begin(), per_step.end());
  return barrier_probe{per_step[per_step.size() / 2], supersteps, group.size()};
}

}  // namespace tessera::host
