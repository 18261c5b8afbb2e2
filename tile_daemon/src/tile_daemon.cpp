#include "tessera/tile/tile_daemon.hpp"

#include <omp.h>
#include <unistd.h>

#include <deque>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "tessera/common/log.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/exchange/fault_plan.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/tile/superstep_loop.hpp"

namespace tessera::tile {

using namespace tessera::exchange;
using namespace std::chrono_literals;

namespace {
std::atomic<bool> g_stop{false};

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}
}  // namespace

void tile_daemon::request_stop() { g_stop.store(true); }

struct tile_daemon::impl {
  tile_config cfg;
  // Declared before the context, so destroyed after it: closing the context drops every frame
  // still queued in the exchange sockets, and borrowed frames point into tile memory and count
  // down the runner's in-flight counter.
  tile_memory memory;
  kernel_registry registry = kernel_registry::with_builtins();
  std::unique_ptr<fault_injector> faults;
  std::unique_ptr<superstep_runner> runner;
  zmq::context_t ctx{1};
  zmq::socket_t control{ctx, zmq::socket_type::dealer};
  std::unique_ptr<zmq_transport> fabric;
  std::map<uint32_t, program> programs;
  std::deque<envelope> deferred;  // control messages that arrived during a run
  // Aborts of batches sent after the one running (async scheduling keeps two in flight): their
  // run messages wait in `deferred` and are answered cancelled instead of run.
  std::set<uint64_t> aborted_ahead;
  bool have_directory = false;
  bool fenced = false;  // the host's shutdown said this incarnation is fenced
  uint32_t group_size = 0;
  std::atomic<uint64_t> mem_used{0}, mem_high{0}, bad{0}, stale{0};
  std::atomic<bool> heartbeat_stop{false};
  uint64_t control_bad = 0;
  std::chrono::steady_clock::time_point last_host_contact = std::chrono::steady_clock::now();

  explicit impl(tile_config c) : cfg(std::move(c)), memory(cfg.tile_id, cfg.memory_capacity) {}

  void publish_memory() {
    mem_used = memory.used();
    mem_high = memory.high_water();
    bad = control_bad + (runner ? runner->bad_messages() : 0);
    stale = runner ? runner->dropped_stale() : 0;
  }

  fault_counts injected() const { return faults ? faults->counts() : fault_counts{}; }

  void reply(const ack& a, std::vector<zmq::message_t> payloads = {}) {
    send_envelope(control, encode(a, std::move(payloads)));
  }

  void heartbeat_loop() {
    zmq::socket_t hb(ctx, zmq::socket_type::dealer);
    apply_socket_defaults(hb);
    hb.set(zmq::sockopt::routing_id, "hb-" + std::to_string(cfg.tile_id) + "-" + std::to_string(cfg.incarnation));
    hb.set(zmq::sockopt::sndhwm, 4);
    secure_host_client(hb);
    hb.connect(cfg.host_endpoint);
    // A stall fault silences the whole tile, heartbeats included: the host must notice. One
    // heartbeat goes out as the stall begins, so the host learns of it (its count) even when it
    // then restarts the silent tile.
    auto stalled = [&] { return faults && faults->stalled(); };
    bool announced = false;
    while (!heartbeat_stop) {
      if (!stalled() || !announced) {
        heartbeat h{cfg.tile_id, cfg.incarnation, mem_used, mem_high, bad, stale, injected()};
        send_envelope(hb, encode(h), zmq::send_flags::dontwait);
      }
      announced = stalled();
      auto until = std::chrono::steady_clock::now() + cfg.heartbeat_interval;
      while (!heartbeat_stop && std::chrono::steady_clock::now() < until && stalled() == announced)
        std::this_thread::sleep_for(10ms);
    }
  }

  // ---- control handlers ----

  void on_alloc(const envelope& e) {
    alloc_tensor m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    auto t = memory.allocate(m.desc, m.zero && !m.has_data);
    if (!t) return reply({m.request_id, cfg.tile_id, t.error().code(), t.error().message()});
    if (m.has_data) std::memcpy((*t)->data, e.payloads[0].data(), e.payloads[0].size());
    publish_memory();
    reply({m.request_id, cfg.tile_id});
  }

  void on_free(const envelope& e) {
    free_tensors m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    status result;
    for (uint32_t id : m.ids)
      if (auto st = memory.release(id); !st.ok()) result.update(st);
    publish_memory();
    reply({m.request_id, cfg.tile_id, result.code(), result.message()});
  }

  status check_program(const program& p) {
    bool member = false;
    for (uint32_t t : p.tiles) {
      TESSERA_RETURN_IF_ERROR(check_tile_id(t, group_size, "program tile"));
      member |= t == cfg.tile_id;
    }
    if (!member) return status::invalid("tile " + std::to_string(cfg.tile_id) + " is not in the program's tiles");
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (const auto& call : p.steps[s].compute) TESSERA_RETURN_IF_ERROR(registry.check(call));
      for (const auto& op : p.steps[s].sends) TESSERA_RETURN_IF_ERROR(check_tile_id(op.peer, group_size, "send peer"));
      for (const auto& op : p.steps[s].recvs) TESSERA_RETURN_IF_ERROR(check_tile_id(op.peer, group_size, "recv peer"));
    }
    return ok_status();
  }

  void on_load(const envelope& e) {
    load_program m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    status st = have_directory ? check_program(m.prog) : status::invalid("program sent before the peer directory");
    if (st.ok() && programs.count(m.prog.id)) st = status::invalid("program " + std::to_string(m.prog.id) + " is loaded already");
    std::vector<uint32_t> allocated;
    for (const auto& t : m.prog.temporaries) {
      if (!st.ok()) break;
      auto r = memory.allocate(t);
      if (!r) st = r.error();
      else allocated.push_back(t.id);
    }
    if (!st.ok()) {
      for (uint32_t id : allocated) (void)memory.release(id);  // a refused program leaves nothing behind
    } else {
      programs[m.prog.id] = std::move(m.prog);
    }
    publish_memory();
    reply({m.request_id, cfg.tile_id, st.code(), st.message()});
  }

  void on_fetch(const envelope& e) {
    fetch_tensor m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    auto s = resolve_slice(m.slice, memory, m.active_tokens);
    if (!s) return reply({m.request_id, cfg.tile_id, s.error().code(), s.error().message()});
    std::vector<zmq::message_t> p;
    p.push_back(copy_frame(s->data, s->bytes()));
    reply({m.request_id, cfg.tile_id, errc::ok, "", 1}, std::move(p));
  }

  // How a run waits: the exchange PULL and the control DEALER in one zmq::poll, so the control
  // socket is drained (interrupted) only when it has something or once per poll_tick.
  result<bool> wait_exchange_or_control(envelope& out, std::chrono::milliseconds timeout, bool& control_ready) {
    auto got = fabric->recv(out, 0ms);  // queued (or looped back) messages need no poll
    if (!got || *got) return got;
    zmq::pollitem_t items[] = {{fabric->inbound().handle(), 0, ZMQ_POLLIN, 0}, {control.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, timeout);
    } catch (const zmq::error_t& ex) {
      if (ex.num() == EINTR) return false;
      if (ex.num() == ETERM) return status{errc::cancelled, "exchange context terminated"};
      return status::io_error(std::string("poll failed: ") + ex.what());
    }
    control_ready = (items[1].revents & ZMQ_POLLIN) != 0;
    if (items[0].revents & ZMQ_POLLIN) return fabric->recv_ready(out);
    return false;
  }

  // While a run waits on the exchange: true if the host asked to abort this batch or to stop.
  bool interrupted(uint64_t batch) {
    if (g_stop) return true;
    for (;;) {
      envelope e;
      auto got = recv_envelope(control, e, nullptr, 0, zmq::recv_flags::dontwait);
      if (!got) {
        ++control_bad;
        continue;
      }
      if (!*got) return false;
      last_host_contact = std::chrono::steady_clock::now();
      auto t = peek_type(e);
      if (t && *t == msg_type::abort_run) {
        abort_run a;
        if (decode(e, a).ok() && a.batch_id == batch) return true;
        if (a.batch_id > batch) aborted_ahead.insert(a.batch_id);  // its run is queued behind this one
        continue;  // an abort for an earlier batch is stale
      }
      if (t && *t == msg_type::shutdown) {
        on_shutdown(e);  // a fenced incarnation mid-run still exits 1
        g_stop = true;
        return true;
      }
      deferred.push_back(std::move(e));
    }
  }

  void on_run(const envelope& e) {
    run_program m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    run_done done;
    done.program_id = m.program_id;
    done.batch_id = m.batch_id;
    done.tile_id = cfg.tile_id;
    std::vector<zmq::message_t> outputs;
    status st;
    batch_rows rows;
    rows.active_tokens = m.active_tokens;
    if (!m.seq_lengths.empty()) {
      rows.seq_offsets.assign(1, 0);
      for (int32_t len : m.seq_lengths) rows.seq_offsets.push_back(rows.seq_offsets.back() + len);
    }
    auto it = programs.find(m.program_id);
    if (it == programs.end()) st = status::not_found("program " + std::to_string(m.program_id) + " is not loaded");
    if (aborted_ahead.erase(m.batch_id)) st = status{errc::cancelled, "run aborted by the host"};
    std::erase_if(aborted_ahead, [&](uint64_t b) { return b < m.batch_id; });  // never to come
    for (size_t i = 0; st.ok() && i < m.inputs.size(); ++i) {
      auto s = resolve_slice(m.inputs[i], memory, rows);
      if (!s) st = s.error().with_context("input " + std::to_string(i));
      else if (s->bytes() != e.payloads[i].size())
        st = status::invalid("input " + std::to_string(i) + " has " + std::to_string(e.payloads[i].size()) +
                             " bytes, its slice holds " + std::to_string(s->bytes()));
      else std::memcpy(s->data, e.payloads[i].data(), e.payloads[i].size());
    }
    if (st.ok()) {
      auto counters = runner->run(it->second, m, [&] { return interrupted(m.batch_id); });
      if (!counters) st = counters.error();
      else if (m.collect_counters) done.counters = std::move(*counters);
    }
    for (size_t i = 0; st.ok() && i < m.outputs.size(); ++i) {
      auto s = resolve_slice(m.outputs[i], memory, rows);
      if (!s) st = s.error().with_context("output " + std::to_string(i));
      else outputs.push_back(copy_frame(s->data, s->bytes()));
    }
    if (!st.ok()) outputs.clear();
    done.code = st.code();
    done.message = st.message();
    publish_memory();
    done.memory_used = memory.used();
    done.memory_high_water = memory.high_water();
    done.injected = injected();
    send_envelope(control, encode(done, std::move(outputs)));
  }

  void on_directory(const envelope& e) {
    peer_directory m;
    if (auto st = decode(e, m); !st.ok()) return reject(st);
    if (cfg.tile_id >= m.endpoints.size()) return reject(status::bad_message("directory does not include this tile"));
    if (auto st = fabric->connect_peers(m.endpoints); !st.ok()) {
      TESSERA_LOG_ERROR(st.to_string());
      return;
    }
    group_size = static_cast<uint32_t>(m.endpoints.size());
    have_directory = true;
    TESSERA_LOG_DEBUG("connected to " << group_size << " tiles");
  }

  // "fenced: ..." (host/src/tile_group.cpp): the host declared this incarnation failed (a
  // partition, silence) and will never use it again. The tile exits with status 1 so that its
  // launcher starts the next incarnation now; a plain shutdown is a clean exit (0).
  void on_shutdown(const envelope& e) {
    exchange::shutdown m;
    if (decode(e, m).ok() && m.reason.rfind("fenced: ", 0) == 0) {
      TESSERA_LOG_ERROR("the host fenced this incarnation (" << m.reason.substr(8) << "); exiting with status 1");
      fenced = true;
    }
  }

  void reject(const status& st) {
    ++control_bad;
    publish_memory();
    TESSERA_LOG_WARN("rejected a control message: " << st.message());
  }

  // Returns false when the tile should exit.
  bool handle_control(envelope&& e) {
    last_host_contact = std::chrono::steady_clock::now();
    auto t = peek_type(e);
    if (!t) {
      reject(t.error());
      return true;
    }
    switch (*t) {
      case msg_type::peer_directory: on_directory(e); break;
      case msg_type::alloc_tensor: on_alloc(e); break;
      case msg_type::free_tensors: on_free(e); break;
      case msg_type::load_program: on_load(e); break;
      case msg_type::run_program: on_run(e); break;
      case msg_type::fetch_tensor: on_fetch(e); break;
      case msg_type::abort_run: break;  // nothing is running: stale
      case msg_type::heartbeat: break;  // the host's keepalive: heard, nothing to do
      case msg_type::shutdown: on_shutdown(e); return false;
      default: reject(status::bad_message("unexpected " + std::string(msg_type_name(*t)) + " on the control socket"));
    }
    return true;
  }

  int serve() {
    auto bound = zmq_transport::bind(ctx, cfg.tile_id, cfg.exchange_bind);
    if (!bound) {
      TESSERA_LOG_ERROR(bound.error().to_string());
      return 1;
    }
    fabric = std::move(*bound);
    if (!cfg.faults.empty()) {
      auto plan = load_fault_plan(cfg.faults);
      if (!plan) {
        TESSERA_LOG_ERROR("--faults: " << plan.error().message());
        return 2;
      }
      if (auto st = fault_injector::check(*plan); !st.ok()) {
        TESSERA_LOG_ERROR("--faults: " << st.message());
        return 2;
      }
      faults = std::make_unique<fault_injector>(plan->for_tile(static_cast<int>(cfg.tile_id)),
                                                static_cast<int>(cfg.tile_id), cfg.incarnation);
    }
    runner = std::make_unique<superstep_runner>(cfg.tile_id, *fabric, memory, registry,
                                                run_limits{.exchange_timeout = cfg.exchange_timeout});
    if (faults && faults->active()) runner->set_faults(faults.get());
    apply_socket_defaults(control);
    secure_host_client(control);
    control.set(zmq::sockopt::routing_id, "tile-" + std::to_string(cfg.tile_id) + "-" + std::to_string(cfg.incarnation));
    try {
      control.connect(cfg.host_endpoint);
    } catch (const zmq::error_t& ex) {
      TESSERA_LOG_ERROR("cannot connect to the host at " << cfg.host_endpoint << ": " << ex.what());
      return 1;
    }
    runner->set_wait([this](envelope& out, std::chrono::milliseconds timeout, bool& control_ready) {
      return wait_exchange_or_control(out, timeout, control_ready);
    });
    register_tile reg{cfg.tile_id, cfg.incarnation, static_cast<int32_t>(getpid()),
                      fabric->endpoint(cfg.advertise_host), host_name(), cfg.memory_capacity};
    send_envelope(control, encode(reg));
    TESSERA_LOG_DEBUG("registered at " << cfg.host_endpoint << ", exchange " << reg.exchange_endpoint << ", memory "
                                      << format_bytes(cfg.memory_capacity));
    std::thread hb([this] { heartbeat_loop(); });
    bool keep = true, abandoned = false;
    while (keep && !g_stop) {
      while (keep && !deferred.empty()) {
        envelope e = std::move(deferred.front());
        deferred.pop_front();
        keep = handle_control(std::move(e));
      }
      if (!keep) break;
      zmq::pollitem_t items[] = {{control.handle(), 0, ZMQ_POLLIN, 0}, {fabric->inbound().handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, 100ms);
      } catch (const zmq::error_t& ex) {
        if (ex.num() == EINTR) continue;
        throw;
      }
      if (items[0].revents & ZMQ_POLLIN) {
        envelope e;
        auto got = recv_envelope(control, e, nullptr, 0, zmq::recv_flags::dontwait);
        if (!got) reject(got.error());
        else if (*got) keep = handle_control(std::move(e));
      }
      if (items[1].revents & ZMQ_POLLIN) {
        envelope e;
        auto got = fabric->recv_ready(e);
        if (!got) reject(got.error());
        else if (*got) runner->accept(std::move(e));
        publish_memory();
      }
      if (cfg.host_silence_limit.count() > 0 &&
          std::chrono::steady_clock::now() - last_host_contact > cfg.host_silence_limit) {
        TESSERA_LOG_ERROR("heard nothing from the host for " << cfg.host_silence_limit.count() << " ms; exiting");
        keep = false;
        abandoned = true;
      }
    }
    heartbeat_stop = true;
    hb.join();
    TESSERA_LOG_DEBUG("shutting down (" << (g_stop ? "signal" : "host request") << ")");
    return abandoned || fenced ? 1 : 0;  // a launcher tells a lost host or a fenced tile from a clean shutdown
  }
};

tile_daemon::tile_daemon(tile_config cfg) : cfg_(std::move(cfg)) {}
tile_daemon::~tile_daemon() = default;

int tile_daemon::run() {
  log::set_prefix("tile " + std::to_string(cfg_.tile_id));
  // A tile is one emulated processor: its kernels use the threads it was given, no more.
  omp_set_num_threads(cfg_.compute_threads);
  try {
    impl i(cfg_);
    return i.serve();
  } catch (const std::exception& ex) {
    TESSERA_LOG_ERROR("fatal: " << ex.what());
    return 1;
  }
}

}  // namespace tessera::tile
