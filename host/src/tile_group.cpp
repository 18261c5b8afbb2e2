#include "tessera/host/tile_group.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
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
}  // namespace

tile_group::tile_group(tile_group_config cfg) : cfg_(std::move(cfg)) {
  tiles_.resize(cfg_.tiles);
  routes_.resize(cfg_.tiles);
  for (uint32_t i = 0; i < cfg_.tiles; ++i) tiles_[i].id = i;
  publish();
}

result<std::unique_ptr<tile_group>> tile_group::start(tile_group_config cfg) {
  if (cfg.tiles == 0 || cfg.tiles > max_tiles)
    return status::invalid("a tile group needs 1.." + std::to_string(max_tiles) + " tiles, not " +
                           std::to_string(cfg.tiles));
  std::unique_ptr<tile_group> g(new tile_group(std::move(cfg)));
  TESSERA_RETURN_IF_ERROR(g->bind_and_launch());
  if (auto st = g->await_registration(); !st) {
    g->shutdown();
    return st;
  }
  {
    std::lock_guard lk(g->mu_);
    peer_directory dir;
    for (const auto& t : g->tiles_) {
      dir.endpoints.push_back(t.exchange_endpoint);
      dir.incarnations.push_back(t.incarnation);
    }
    for (uint32_t i = 0; i < g->cfg_.tiles; ++i) TESSERA_RETURN_IF_ERROR(g->send_to(i, encode(dir)));
  }
  g->monitor_ = std::thread([p = g.get()] { p->monitor_loop(); });
  return g;
}

tile_group::~tile_group() { shutdown(); }

status tile_group::bind_and_launch() {
  apply_socket_defaults(router_);
  router_.set(zmq::sockopt::router_mandatory, 1);
  router_.set(zmq::sockopt::sndhwm, 0);
  exchange::secure_server(ctx_, router_);  // CurveZMQ + ZAP when keys are loaded
  try {
    router_.bind(cfg_.control_bind);
  } catch (const zmq::error_t& ex) {
    return status::io_error("cannot bind the host's control socket at " + cfg_.control_bind + ": " + ex.what() +
                            "; choose another --control address or port");
  }
  control_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  if (!cfg_.advertise_host.empty() && control_endpoint_.rfind("tcp://", 0) == 0)
    control_endpoint_ = "tcp://" + cfg_.advertise_host + control_endpoint_.substr(control_endpoint_.rfind(':'));
  if (!cfg_.launch_local) return status::ok();

  char tmpl[] = "/tmp/tessera-XXXXXX";
  if (!mkdtemp(tmpl)) return status::io_error("cannot create a run directory under /tmp");
  run_dir_ = tmpl;
  launcher_ = std::make_unique<local_launcher>(cfg_.launcher);
  for (uint32_t i = 0; i < cfg_.tiles; ++i) {
    if (auto st = spawn_tile(i); !st) {
      shutdown();
      return st;
    }
  }
  publish();
  return status::ok();
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
  return status::ok();
}

status tile_group::restart_tile(uint32_t tile) {
  std::unique_lock lk(mu_);
  if (tile >= cfg_.tiles) return status::invalid("no tile " + std::to_string(tile));
  if (!launcher_) return status::unsupported("tile " + std::to_string(tile) + " was launched elsewhere; restart it there (with a higher --incarnation)");
  auto& t = tiles_[tile];
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
  TESSERA_RETURN_IF_ERROR(spawn_tile(tile));
  publish();
  bool ok = pump_until([&] { return (t.registered && t.incarnation == next) || t.failed; },
                       steady::now() + cfg_.register_timeout);
  if (!ok || t.failed)
    return status::peer_failed("tile " + std::to_string(tile) + " did not come back after a restart" +
                               (t.failed ? ": " + t.failure : std::string()));
  peer_directory dir;
  for (const auto& x : tiles_) {
    dir.endpoints.push_back(x.exchange_endpoint);
    dir.incarnations.push_back(x.incarnation);
  }
  for (uint32_t i = 0; i < cfg_.tiles; ++i)
    if (!tiles_[i].failed) TESSERA_RETURN_IF_ERROR(send_to(i, encode(dir)));
  ++restarts_;
  publish();
  TESSERA_LOG_WARN("tile " << tile << " restarted as incarnation " << next);
  return status::ok();
}

status tile_group::await_registration() {
  std::unique_lock lk(mu_);
  auto deadline = steady::now() + cfg_.register_timeout;
  bool all = pump_until(
      [&] {
        for (const auto& t : tiles_)
          if (!t.registered && !t.failed) return false;
        return true;
      },
      deadline);
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
  return status::ok();
}

void tile_group::monitor_loop() {
  while (!monitor_stop_) {
    std::this_thread::sleep_for(50ms);
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock() || shut_) continue;
    pump_once(0ms);
    check_liveness();
  }
}

void tile_group::mark_failed(uint32_t tile, const std::string& why) {
  auto& t = tiles_[tile];
  if (t.failed) return;
  t.failed = true;
  t.failure = why;
  TESSERA_LOG_ERROR("tile " << tile << " failed: " << why);
}

void tile_group::check_liveness() {
  struct publish_on_exit {
    tile_group* g;
    ~publish_on_exit() { g->publish(); }
  } on_exit{this};
  auto now = steady::now();
  for (auto& t : tiles_) {
    if (t.failed) continue;
    if (t.local && t.pid > 0) {
      if (auto why = launcher_->poll_exit(t.pid)) {
        t.pid = 0;
        mark_failed(t.id, "process " + *why);
        continue;
      }
    }
    if (t.registered && now - t.last_heartbeat > cfg_.heartbeat_timeout)
      mark_failed(t.id, "no heartbeat for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - t.last_heartbeat).count()) +
                            " ms (limit " + std::to_string(cfg_.heartbeat_timeout.count()) + " ms)");
  }
}

bool tile_group::pump_until(const std::function<bool()>& done, steady::time_point deadline) {
  auto last_check = steady::now();
  for (;;) {
    if (done()) return true;
    auto now = steady::now();
    if (now >= deadline) return false;
    auto wait = std::min<steady::duration>(deadline - now, 20ms);
    pump_once(std::chrono::duration_cast<std::chrono::milliseconds>(wait) + 1ms);
    if (steady::now() - last_check > 20ms) {
      check_liveness();
      last_check = steady::now();
    }
  }
}

void tile_group::pump_once(std::chrono::milliseconds wait) {
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    if (zmq::poll(&item, 1, wait) == 0) return publish();
  } catch (const zmq::error_t&) {
    return publish();
  }
  for (int i = 0; i < 10000; ++i) {
    envelope e;
    std::vector<zmq::message_t> route;
    auto got = recv_envelope(router_, e, &route, 1, zmq::recv_flags::dontwait);
    if (!got) {
      ++bad_messages_;
      TESSERA_LOG_WARN("dropped a bad control message: " << got.error().message());
      continue;
    }
    if (!*got) break;
    dispatch(route, std::move(e));
  }
  publish();
}

void tile_group::dispatch(std::vector<zmq::message_t>& route, envelope&& e) {
  auto type = peek_type(e);
  auto bad = [&](const std::string& why) {
    ++bad_messages_;
    TESSERA_LOG_WARN("dropped a control message: " << why);
  };
  if (!type) return bad(type.error().message());
  const std::string identity = route.empty() ? "" : route[0].to_string();
  switch (*type) {
    case msg_type::register_tile: {
      register_tile m;
      if (auto st = decode(e, m); !st) return bad(st.message());
      if (m.tile_id >= cfg_.tiles) return bad("register from tile " + std::to_string(m.tile_id) + ", group has " +
                                              std::to_string(cfg_.tiles));
      if (identity != "tile-" + std::to_string(m.tile_id) + "-" + std::to_string(m.incarnation))
        return bad("register whose socket identity '" + identity + "' does not match tile " + std::to_string(m.tile_id));
      auto& t = tiles_[m.tile_id];
      if (m.incarnation < t.incarnation || (t.registered && m.incarnation == t.incarnation && !t.failed))
        return bad("stale or duplicate register for tile " + std::to_string(m.tile_id) + " incarnation " +
                   std::to_string(m.incarnation));
      t.registered = true;
      t.failed = false;
      t.failure.clear();
      t.incarnation = m.incarnation;
      t.hostname = m.hostname;
      t.exchange_endpoint = m.exchange_endpoint;
      t.memory_capacity = m.memory_capacity;
      if (!t.local) t.pid = m.pid;
      t.last_heartbeat = steady::now();
      routes_[m.tile_id] = identity;
      TESSERA_LOG_DEBUG("tile " << m.tile_id << " registered from " << m.hostname << " at " << m.exchange_endpoint);
      return;
    }
    case msg_type::heartbeat: {
      heartbeat m;
      if (auto st = decode(e, m); !st) return bad(st.message());
      if (m.tile_id >= cfg_.tiles) return bad("heartbeat from unknown tile " + std::to_string(m.tile_id));
      auto& t = tiles_[m.tile_id];
      if (m.incarnation != t.incarnation || t.failed) return;  // an old incarnation
      t.last_heartbeat = steady::now();
      t.memory_used = m.memory_used;
      t.memory_high_water = m.memory_high_water;
      t.bad_messages = m.bad_messages;
      t.stale_messages = m.stale_messages;
      t.injected = m.injected;
      return;
    }
    case msg_type::ack: {
      ack m;
      if (auto st = decode(e, m); !st) return bad(st.message());
      acks_[m.request_id] = {std::move(m), std::move(e.payloads)};
      return;
    }
    case msg_type::run_done: {
      run_done m;
      if (auto st = decode(e, m); !st) return bad(st.message());
      if (m.tile_id >= cfg_.tiles) return bad("run_done from unknown tile");
      tiles_[m.tile_id].memory_high_water = std::max(tiles_[m.tile_id].memory_high_water, m.memory_high_water);
      tiles_[m.tile_id].last_heartbeat = steady::now();
      if (identity == routes_[m.tile_id]) tiles_[m.tile_id].injected = m.injected;  // not an old incarnation's
      done_[{m.batch_id, m.tile_id}] = {std::move(m), std::move(e.payloads)};
      return;
    }
    default:
      return bad("unexpected " + std::string(msg_type_name(*type)) + " at the host");
  }
}

status tile_group::send_to(uint32_t tile, envelope&& e) {
  if (tile >= cfg_.tiles) return status::invalid("no tile " + std::to_string(tile) + " in a group of " + std::to_string(cfg_.tiles));
  if (tiles_[tile].failed) return status::peer_failed("tile " + std::to_string(tile) + " has failed: " + tiles_[tile].failure);
  try {
    zmq::message_t id(routes_[tile].data(), routes_[tile].size());
    router_.send(id, zmq::send_flags::sndmore);
    send_envelope(router_, std::move(e));
  } catch (const zmq::error_t& ex) {
    mark_failed(tile, std::string("unreachable: ") + ex.what());
    return status::peer_failed("tile " + std::to_string(tile) + " is unreachable: " + ex.what());
  }
  return status::ok();
}

result<ack> tile_group::await_ack(uint64_t request_id, uint32_t tile) {
  bool got = pump_until([&] { return acks_.count(request_id) || tiles_[tile].failed; },
                        steady::now() + cfg_.request_timeout);
  auto it = acks_.find(request_id);
  if (it == acks_.end()) {
    if (tiles_[tile].failed) return status::peer_failed("tile " + std::to_string(tile) + " failed: " + tiles_[tile].failure);
    (void)got;
    return status::timeout("tile " + std::to_string(tile) + " did not answer within " +
                           std::to_string(cfg_.request_timeout.count()) + " ms");
  }
  ack a = std::move(it->second.first);
  acks_.erase(it);
  if (a.code != errc::ok) return status{a.code, a.message};
  return a;
}

status tile_group::alloc(uint32_t tile, const tensor_desc& desc, const void* data) {
  return alloc_many({{tile, desc, data}});
}

status tile_group::alloc_many(const std::vector<alloc_request>& reqs,
                              const std::function<void(uint64_t, uint64_t)>& progress) {
  std::lock_guard lk(mu_);
  uint64_t total = 0, sent = 0;
  for (const auto& r : reqs) total += r.data ? r.desc.bytes() : 0;
  // Keep a bounded window in flight so a large model streams without queueing it all twice.
  constexpr size_t window = 16;
  std::vector<std::pair<uint64_t, uint32_t>> pending;
  status first_error;
  auto drain = [&](size_t keep) {
    while (pending.size() > keep) {
      auto [id, tile] = pending.front();
      pending.erase(pending.begin());
      auto a = await_ack(id, tile);
      if (!a && first_error) first_error = a.error().with_context("allocating on tile " + std::to_string(tile));
    }
  };
  for (const auto& r : reqs) {
    alloc_tensor m{next_request_++, r.desc, r.data != nullptr, true};
    zmq::message_t frame = r.data ? copy_frame(r.data, r.desc.bytes()) : zmq::message_t();
    if (auto st = send_to(r.tile, encode(m, std::move(frame))); !st) return st;
    pending.push_back({m.request_id, r.tile});
    drain(window);
    if (!first_error) break;
    sent += r.data ? r.desc.bytes() : 0;
    if (progress) progress(sent, total);
  }
  drain(0);
  return first_error;
}

status tile_group::free(uint32_t tile, const std::vector<uint32_t>& ids) {
  std::lock_guard lk(mu_);
  free_tensors m{next_request_++, ids};
  TESSERA_RETURN_IF_ERROR(send_to(tile, encode(m)));
  auto a = await_ack(m.request_id, tile);
  return a ? status::ok() : a.error();
}

status tile_group::load(const std::map<uint32_t, program>& per_tile) {
  std::lock_guard lk(mu_);
  std::vector<std::pair<uint64_t, uint32_t>> pending;
  for (const auto& [tile, prog] : per_tile) {
    load_program m{next_request_++, prog};
    TESSERA_RETURN_IF_ERROR(send_to(tile, encode(m)));
    pending.push_back({m.request_id, tile});
  }
  status first;
  for (auto [id, tile] : pending) {
    auto a = await_ack(id, tile);
    if (!a && first) first = a.error().with_context("loading the program on tile " + std::to_string(tile));
  }
  return first;
}

result<std::vector<float>> tile_group::fetch(uint32_t tile, const slice_ref& slice, int64_t active_tokens) {
  std::lock_guard lk(mu_);
  fetch_tensor m{next_request_++, slice, active_tokens};
  TESSERA_RETURN_IF_ERROR(send_to(tile, encode(m)));
  bool ok = pump_until([&] { return acks_.count(m.request_id) || tiles_[tile].failed; },
                       steady::now() + cfg_.request_timeout);
  auto it = acks_.find(m.request_id);
  if (!ok || it == acks_.end()) return status::peer_failed("tile " + std::to_string(tile) + " did not return the tensor");
  auto [a, payloads] = std::move(it->second);
  acks_.erase(it);
  if (a.code != errc::ok) return status{a.code, a.message};
  std::vector<float> out(payloads[0].size() / 4);
  std::memcpy(out.data(), payloads[0].data(), payloads[0].size());
  return out;
}

result<run_result> tile_group::run(const batch_spec& spec) {
  std::unique_lock lk(mu_);
  auto t0 = steady::now();
  std::vector<uint32_t> parts = spec.tiles;
  if (parts.empty())
    for (uint32_t i = 0; i < cfg_.tiles; ++i) parts.push_back(i);
  for (uint32_t p : parts) {
    if (p >= cfg_.tiles) return status::invalid("batch names tile " + std::to_string(p) + ", outside the group");
    if (tiles_[p].failed) return status::peer_failed("tile " + std::to_string(p) + " has failed: " + tiles_[p].failure);
  }
  const uint64_t batch = next_batch_++;
  // Output j comes back as the k-th output frame of its tile.
  std::map<uint32_t, std::vector<size_t>> outputs_of;
  for (size_t j = 0; j < spec.outputs.size(); ++j) outputs_of[spec.outputs[j].tile].push_back(j);
  for (uint32_t p : parts) {
    run_program m;
    m.program_id = spec.program_id;
    m.batch_id = batch;
    m.seq_lengths = spec.seq_lengths;
    m.active_tokens = spec.active_tokens;
    m.collect_counters = spec.collect_counters;
    std::vector<zmq::message_t> frames;
    for (const auto& in : spec.inputs) {
      if (in.tile != p) continue;
      m.inputs.push_back(in.dst);
      frames.push_back(copy_frame(in.data, in.bytes));
    }
    for (size_t j : outputs_of[p]) m.outputs.push_back(spec.outputs[j].src);
    if (auto st = send_to(p, encode(m, std::move(frames))); !st) return st;
  }
  auto all_done = [&] {
    for (uint32_t p : parts)
      if (!done_.count({batch, p})) return false;
    return true;
  };
  // A tile that answered with an error (a corrupt slice, a kernel error) ends the batch for
  // everyone: its peers would otherwise wait for it until the exchange timeout.
  auto any_failed = [&] {
    for (uint32_t p : parts) {
      if (tiles_[p].failed && !done_.count({batch, p})) return true;
      auto it = done_.find({batch, p});
      if (it != done_.end() && it->second.first.code != errc::ok) return true;
    }
    return false;
  };
  // Wait, giving the socket up between short pumps so that runs of other replicas (other
  // threads) can send and collect theirs.
  bool finished = false;
  const auto deadline = t0 + cfg_.run_timeout;
  for (;;) {
    if (all_done() || any_failed()) {
      finished = true;
      break;
    }
    if (steady::now() >= deadline) break;
    pump_once(1ms);
    check_liveness();
    lk.unlock();
    std::this_thread::yield();
    lk.lock();
  }
  auto cleanup = [&] {
    for (uint32_t p : parts) done_.erase({batch, p});
  };
  const bool tile_error = finished && !all_done() && [&] {
    for (uint32_t p : parts)
      if (!tiles_[p].failed && done_.count({batch, p}) && done_[{batch, p}].first.code != errc::ok) return true;
    return false;
  }();
  if (tile_error) {
    std::vector<uint32_t> late;
    status first;
    for (uint32_t p : parts) {
      auto it = done_.find({batch, p});
      if (it == done_.end()) late.push_back(p);
      else if (it->second.first.code != errc::ok && first)
        first = status{it->second.first.code, "tile " + std::to_string(p) + ": " + it->second.first.message};
    }
    for (uint32_t p : late) (void)send_to(p, encode(abort_run{spec.program_id, batch, "a peer reported an error"}));
    pump_until([&] {
      for (uint32_t p : late)
        if (!done_.count({batch, p}) && !tiles_[p].failed) return false;
      return true;
    }, steady::now() + 2s);
    for (uint32_t p : parts) done_.erase({batch, p});
    return first;
  }
  if (!finished || any_failed()) {
    std::vector<uint32_t> failed, late;
    std::string why;
    for (uint32_t p : parts) {
      if (tiles_[p].failed) {
        failed.push_back(p);
        why += "; tile " + std::to_string(p) + " " + tiles_[p].failure;
      } else if (!done_.count({batch, p})) {
        late.push_back(p);
      }
    }
    // Stop the survivors and wait briefly for them to answer, so the next batch starts clean.
    for (uint32_t p : late) (void)send_to(p, encode(abort_run{spec.program_id, batch, "a peer failed"}));
    pump_until([&] {
      for (uint32_t p : late)
        if (!done_.count({batch, p}) && !tiles_[p].failed) return false;
      return true;
    }, steady::now() + 2s);
    cleanup();
    if (!failed.empty())
      return status::peer_failed("batch " + std::to_string(batch) + " failed: tiles " + join_ids(failed) + " failed" + why);
    return status::timeout("batch " + std::to_string(batch) + " took longer than " +
                           std::to_string(cfg_.run_timeout.count()) + " ms on tiles " + join_ids(late));
  }
  run_result out;
  out.batch_id = batch;
  out.outputs.resize(spec.outputs.size());
  status first_error;
  for (uint32_t p : parts) {
    auto& [done, frames] = done_[{batch, p}];
    if (done.code != errc::ok) {
      if (first_error) first_error = status{done.code, "tile " + std::to_string(p) + ": " + done.message};
      continue;
    }
    out.counters[p] = std::move(done.counters);
    out.memory_high_water[p] = done.memory_high_water;
    const auto& mine = outputs_of[p];
    if (frames.size() != mine.size()) {
      if (first_error) first_error = status::bad_message("tile " + std::to_string(p) + " returned a wrong number of outputs");
      continue;
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      auto& v = out.outputs[mine[k]];
      v.resize(frames[k].size() / 4);
      std::memcpy(v.data(), frames[k].data(), frames[k].size());
    }
  }
  cleanup();
  if (!first_error) return first_error;
  out.wall_seconds = std::chrono::duration<double>(steady::now() - t0).count();
  return out;
}

void tile_group::publish() {
  std::lock_guard lk(snapshot_mu_);
  snapshot_ = tiles_;
}

std::vector<tile_info> tile_group::tiles() const {
  std::lock_guard lk(snapshot_mu_);
  return snapshot_;
}

status tile_group::health() const {
  std::vector<uint32_t> failed;
  std::string why;
  for (const auto& t : tiles())
    if (t.failed) {
      failed.push_back(t.id);
      why += "; tile " + std::to_string(t.id) + " " + t.failure;
    }
  if (failed.empty()) return status::ok();
  return status::peer_failed("tiles " + join_ids(failed) + " failed" + why);
}

status tile_group::signal_tile(uint32_t tile, int sig) {
  auto snapshot = tiles();
  if (tile >= cfg_.tiles || !snapshot[tile].local || snapshot[tile].pid <= 0)
    return status::invalid("tile " + std::to_string(tile) + " is not a running local tile");
  if (kill(snapshot[tile].pid, sig) != 0) return status::io_error("kill failed");
  return status::ok();
}

void tile_group::shutdown() {
  monitor_stop_ = true;
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard lk(mu_);
  if (shut_) return;
  shut_ = true;
  for (uint32_t i = 0; i < cfg_.tiles; ++i)
    if (tiles_[i].registered && !tiles_[i].failed) (void)send_to(i, encode(exchange::shutdown{"host shutdown"}));
  if (launcher_) {
    // Give tiles a moment to exit on the shutdown message, then make sure.
    auto deadline = steady::now() + 2s;
    for (auto& t : tiles_) {
      while (t.pid > 0 && steady::now() < deadline && !launcher_->poll_exit(t.pid)) std::this_thread::sleep_for(2ms);
      if (t.pid > 0 && !launcher_->poll_exit(t.pid)) launcher_->stop(t.pid, 500);
      t.pid = 0;
    }
  }
  publish();
  if (!run_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
  }
}

}  // namespace tessera::host
