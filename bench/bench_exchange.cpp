// tessera-bench-exchange: what tessera's exchange and sync cost on top of plain ZeroMQ.
//
// One run measures, between real processes on this machine:
//   (a) raw ZeroMQ throughput: PUSH -> PULL over ipc:// (like libzmq's remote_thr/local_thr),
//   (b) tessera's exchange goodput for the same sizes: exchange::zmq_transport, the sender doing
//       encode(exchange_data, borrow_frame(slice, &in_flight)) (no copy; it waits for in_flight
//       to drain before the slice may change) and the receiver a tile::superstep_runner, the
//       tile's own receive path (decode, inbox, checksum check, then the slice received in
//       place: the message kept as the tensor's storage; the sender computes payload_checksum
//       as exchange_phase does). A diagnostic runs the same with the receive copying into the
//       arena (run_limits::in_place_min_bytes = max, as tiles did before receiving in place);
//   (c) tessera's superstep sync: a real tile group (tessera::host::tile_group) running a program
//       of empty supersteps with sync = true (the tile's combining-tree barrier over the exchange
//       sockets),
//   (d) a plain ZeroMQ barrier among as many processes: a ROUTER coordinator collects N
//       "arrive" messages from N DEALER processes, then releases all of them;
//   (e) the slice checksum alone (exchange::payload_checksum, in this process, on a warm slice of
//       each size) against a memcpy of the same slice;
//   (f) the tile's receive path alone, in this process, without sockets or a second process: a
//       superstep_runner consuming prepared messages (ZeroMQ-allocated, as off a socket, more of
//       them than the caches hold), received in place or copied into the arena, beside the
//       checksum of the same messages: where a receiving tile's own time goes, with little of
//       the noise of a shared machine (one thread, best of --repeats).
// Both sides of a comparison run under the same flow control (a credit window of acks from the
// receiver) and, for (c)/(d), the same process count, interleaved per size so background load
// hits both alike. Prints a markdown table with the targets (goodput >= 80% of raw from 64 KiB;
// sync <= 1.5x the plain barrier); --csv PATH also writes the rows as CSV.
//
//   build-bench/bin/tessera-bench-exchange            # full run (~1-2 minutes)
//   build-bench/bin/tessera-bench-exchange --quick --csv /tmp/exchange.csv
//   build-bench/bin/tessera-bench-exchange --part checksum --sizes 1M
//   build-bench/bin/tessera-bench-exchange --part receive --sizes 64K,1M,4M
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>
#include <string>
#include <tuple>
#include <vector>
#include <zmq.hpp>

#include "tessera/common/log.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/tile/kernel_registry.hpp"
#include "tessera/tile/superstep_loop.hpp"
#include "tessera/tile/tile_memory.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// CPU time of this whole process (every thread, ZeroMQ's I/O thread included), seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU time (user + system) of another process from /proc/PID/stat, seconds (clock-tick resolution).
double other_cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 3.. after "pid (comm)"
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct options {
  std::vector<size_t> sizes{4 << 10, 64 << 10, 1 << 20};
  std::vector<uint32_t> tiles{2, 4, 8, 16};
  double seconds = 0.75;  // per throughput measurement
  int repeats = 3;        // throughput: best of
  uint32_t supersteps = 200;
  int runs = 5;           // sync: timed batches (after one warm-up batch)
  std::string csv;
  std::string part = "all";
  std::string dir;        // temp dir for ipc sockets
};

// ---- child processes ----------------------------------------------------------------------

// Forks; the child runs `body` and _exits with its return value. The parent must hold no ZeroMQ
// context when calling this (contexts are not fork-safe), so every measurement forks first.
pid_t fork_child(const std::function<int()>& body) {
  std::cout.flush();
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "bench child: %s\n", ex.what());
    }
    _exit(rc);
  }
  return pid;
}

bool reap(pid_t pid, const char* what) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::fprintf(stderr, "tessera-bench-exchange: %s child failed (status %d)\n", what, st);
    return false;
  }
  return true;
}

// ---- (a)/(b) throughput ---------------------------------------------------------------------

// Flow control shared by both modes: the sender may be `window` messages ahead of the receiver,
// which acknowledges every `ack_every` messages. Bounds memory (tessera's exchange sockets have
// no high-water mark) without stalling the pipe.
struct credit {
  uint64_t window, ack_every;
};
credit credit_for(size_t size) {
  uint64_t w = std::clamp<uint64_t>((32ull << 20) / size, 64, 1024);
  return {w, w / 4};
}

constexpr auto child_idle_limit = 20s;  // a child that hears nothing this long gives up

// The receiver's CPU time over the timed messages (those after the sender's warm-up window),
// left in a file for the parent.
struct cpu_meter {
  std::string path;
  uint64_t warm;
  double start = 0;
  void on_message(uint64_t count) {
    if (count == warm) start = process_cpu_seconds();
  }
  /// `in_place_share`: the share of payload bytes the receiver kept in place (tessera only).
  void finish(uint64_t count, double in_place_share = 0) {
    std::ofstream(path) << (process_cpu_seconds() - start) << " " << (count - warm) << " " << in_place_share << "\n";
  }
};

// Raw: PUSH/PULL with ZeroMQ's defaults; sender sends zmq_msg_init_size messages (no copy),
// receiver drops them unread. Acks come back on a second PUSH/PULL pair.
int raw_receiver(const std::string& dir, size_t size) {
  zmq::context_t ctx(1);
  zmq::socket_t in(ctx, zmq::socket_type::pull), ack(ctx, zmq::socket_type::push);
  in.set(zmq::sockopt::linger, 0);
  ack.set(zmq::sockopt::linger, 0);
  in.bind("ipc://" + dir + "/raw-data.sock");
  ack.connect("ipc://" + dir + "/raw-ack.sock");
  const credit c = credit_for(size);
  cpu_meter meter{dir + "/child-cpu.txt", c.window};
  uint64_t count = 0;
  for (;;) {
    zmq::pollitem_t item{in.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::duration_cast<std::chrono::milliseconds>(child_idle_limit)) == 0) return 3;
    zmq::message_t m;
    while (in.recv(m, zmq::recv_flags::dontwait)) {
      if (m.size() == 0) return meter.finish(count), 0;  // stop
      if (m.size() != size) return 4;
      meter.on_message(++count);
      if (count % c.ack_every == 0) ack.send(zmq::buffer(&count, sizeof count));
    }
  }
}

// Tessera: both ends are exchange::zmq_transport (tile 0 sends, tile 1 receives). The receiver
// is the tile's own receive path: a tile::superstep_runner running batches of `ack_every`
// supersteps, each receiving one slice from tile 0 into tile memory (accept: peek_type, decode
// with checks, the inbox; exchange_phase: resolve the slice, size and checksum checks, then the
// message kept as the tensor's storage, or with `in_place` false a memcpy into the arena). The
// tile's cap leaves room for a held slice beside its arena bytes, as it must on a real tile.
// After each batch it acknowledges (a sync_token back over the same fabric, superstep = slices
// received so far). The sender stops it with SIGUSR1, which the runner's `interrupted` sees.
volatile sig_atomic_t receiver_stop = 0;

// The receiving tile's program in (b) and (f): `steps` supersteps of tiles 0 and 1, each
// receiving one whole slice of `size` bytes from tile 0 into tensor 1, without a barrier.
exchange::program receive_program(size_t size, uint64_t steps) {
  exchange::program prog;
  prog.id = 1;
  prog.tiles = {0, 1};
  exchange::superstep step;
  step.recvs.push_back({.peer = 0, .tag = 0, .dst = {.tensor_id = 1, .offset = 0, .count = size / 4}});
  step.sync = false;
  prog.steps.assign(steps, step);
  return prog;
}

int tessera_receiver(const std::string& dir, size_t size, bool in_place) {
  receiver_stop = 0;
  signal(SIGUSR1, [](int) { receiver_stop = 1; });
  zmq::context_t ctx(1);
  auto t = exchange::zmq_transport::bind(ctx, 1, "ipc://" + dir + "/tile-1.sock");
  if (!t) return 5;
  if (!(*t)->connect_peers({"ipc://" + dir + "/tile-0.sock", "ipc://" + dir + "/tile-1.sock"}).ok()) return 5;
  const credit c = credit_for(size);
  tile::tile_memory memory(1, 2 * size + (1 << 20));
  const exchange::tensor_desc slice{.id = 1, .name = "slice", .shape = {static_cast<int64_t>(size / 4)}};
  if (!memory.allocate(slice).ok()) return 5;
  const tile::kernel_registry registry = tile::kernel_registry::with_builtins();
  const tile::run_limits limits{.exchange_timeout = child_idle_limit,
                                .in_place_min_bytes = in_place ? tile::run_limits{}.in_place_min_bytes : UINT64_MAX};
  tile::superstep_runner runner(1, **t, memory, registry, limits);
  const exchange::program prog = receive_program(size, c.ack_every);
  cpu_meter meter{dir + "/child-cpu.txt", c.window};
  uint64_t count = 0;
  // The parent checks the path taken was the one it names (and the CSV says which).
  auto finish = [&] {
    meter.finish(count, count > 0 ? static_cast<double>(runner.received_in_place()) / static_cast<double>(count * size) : 0);
    return 0;
  };
  for (uint64_t batch = 1;; ++batch) {
    auto ran = runner.run(prog, {.program_id = 1, .batch_id = batch, .collect_counters = false},
                          [] { return receiver_stop != 0; });
    if (!ran.ok()) {
      // Stopped: the runner saw the flag (cancelled), or SIGUSR1 cut ZeroMQ's wait short (EINTR).
      if (ran.error().code() == errc::cancelled || receiver_stop) return finish();
      std::fprintf(stderr, "tessera receiver: %s\n", ran.error().to_string().c_str());
      return 7;
    }
    if (runner.bad_messages() != 0) return 7;
    count += c.ack_every;
    meter.on_message(count);
    exchange::sync_token s{1, 1, static_cast<uint32_t>(count), 0, 1};
    if (!(*t)->send(0, exchange::encode(s)).ok()) return 6;
  }
}

struct throughput {
  double rate = 0;           // payload bytes per second
  double sender_cpu_us = 0;  // CPU per message, sender process (all threads)
  double receiver_cpu_us = 0;
  double in_place_share = 0;  // of payload bytes the receiver kept in place
};

// Sends for ~`seconds` after a warm-up window; the rate is payload bytes per second measured at
// the sender from the first timed send until the receiver acknowledged the last message.
// mode 0 = raw, 1 = tessera (borrow_frame + in-flight counter, as superstep_loop.cpp; receive in
// place), 2 = tessera with copy_frame per send (diagnostic: how slices were sent before
// borrow_frame), 3 = tessera receiving by a copy into the arena (diagnostic: before receive in place).
throughput measure_throughput(const options& o, int mode, size_t size) {
  const bool tessera_mode = mode != 0;
  std::filesystem::remove(o.dir + "/child-cpu.txt");
  std::filesystem::remove(o.dir + "/raw-data.sock");
  std::filesystem::remove(o.dir + "/raw-ack.sock");
  std::filesystem::remove(o.dir + "/tile-0.sock");
  std::filesystem::remove(o.dir + "/tile-1.sock");
  pid_t child = fork_child(
      [&] { return tessera_mode ? tessera_receiver(o.dir, size, mode != 3) : raw_receiver(o.dir, size); });
  const credit c = credit_for(size);
  throughput out;
  {
    zmq::context_t ctx(1);
    uint64_t sent = 0, acked = 0;
    std::atomic<uint32_t> in_flight{0};  // declared before t: outlives every borrowed frame
    std::vector<float> src(size / 4);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 1000) * 0.5f;

    // Mode-specific send / wait-for-ack / stop.
    std::unique_ptr<exchange::zmq_transport> t;
    zmq::socket_t data(ctx, zmq::socket_type::push), ack(ctx, zmq::socket_type::pull);
    data.set(zmq::sockopt::linger, 0);
    ack.set(zmq::sockopt::linger, 0);
    if (tessera_mode) {
      auto b = exchange::zmq_transport::bind(ctx, 0, "ipc://" + o.dir + "/tile-0.sock");
      if (!b) throw std::runtime_error(b.error().to_string());
      t = std::move(*b);
      auto st = t->connect_peers({"ipc://" + o.dir + "/tile-0.sock", "ipc://" + o.dir + "/tile-1.sock"});
      if (!st.ok()) throw std::runtime_error(st.to_string());
    } else {
      ack.bind("ipc://" + o.dir + "/raw-ack.sock");
      data.connect("ipc://" + o.dir + "/raw-data.sock");
    }
    auto send_one = [&] {
      if (tessera_mode) {
        // Slice `sent` is superstep sent % ack_every of batch sent / ack_every + 1 at the receiver.
        exchange::exchange_data d{1, sent / c.ack_every + 1, static_cast<uint32_t>(sent % c.ack_every), 0, 1, 0,
                                  size / 4, exchange::payload_checksum(src.data(), size)};  // as exchange_phase
        zmq::message_t frame = mode == 2 ? exchange::copy_frame(src.data(), size)
                                         : exchange::borrow_frame(src.data(), size, &in_flight);
        auto st = t->send(1, exchange::encode(d, std::move(frame)));
        if (!st.ok()) throw std::runtime_error(st.to_string());
      } else {
        zmq::message_t m(size);
        data.send(m, zmq::send_flags::none);
      }
      ++sent;
    };
    auto wait_ack = [&] {  // blocks for the next ack
      auto t0 = steady::now();
      for (;;) {
        if (tessera_mode) {
          exchange::envelope e;
          auto got = t->recv(e, 50ms);
          if (!got) throw std::runtime_error(got.error().to_string());
          exchange::sync_token s;
          if (*got && exchange::decode(e, s).ok()) {
            acked = s.superstep;
            return;
          }
        } else {
          zmq::pollitem_t item{ack.handle(), 0, ZMQ_POLLIN, 0};
          if (zmq::poll(&item, 1, 50ms) > 0) {
            zmq::message_t m;
            if (ack.recv(m, zmq::recv_flags::dontwait) && m.size() == sizeof acked) {
              std::memcpy(&acked, m.data(), sizeof acked);
              return;
            }
          }
        }
        if (steady::now() - t0 > child_idle_limit) throw std::runtime_error("receiver stopped acknowledging");
      }
    };
    auto send_batch = [&] {  // ack_every messages, within the credit window
      for (uint64_t i = 0; i < c.ack_every; ++i) {
        while (sent - acked >= c.window) wait_ack();
        send_one();
      }
    };
    auto drain = [&] {  // every message acknowledged and (modes 1, 3) every borrowed frame released
      while (acked < sent) wait_ack();
      while (in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    };

    for (uint64_t i = 0; i < c.window / c.ack_every; ++i) send_batch();  // warm-up: connect, fault pages
    drain();
    const uint64_t sent0 = sent;
    auto t0 = steady::now();
    const double cpu0 = process_cpu_seconds();
    while (seconds_since(t0) < o.seconds) send_batch();
    drain();
    const double elapsed = seconds_since(t0);
    out.rate = static_cast<double>(sent - sent0) * static_cast<double>(size) / elapsed;
    out.sender_cpu_us = (process_cpu_seconds() - cpu0) * 1e6 / static_cast<double>(sent - sent0);

    if (tessera_mode) {
      kill(child, SIGUSR1);  // the receiver's run() is interrupted between batches
    } else {
      zmq::message_t stop(0);
      data.send(stop, zmq::send_flags::none);
    }
    // Let the raw stop message leave before the context closes (linger is 0).
    std::this_thread::sleep_for(20ms);
  }
  if (!reap(child, tessera_mode ? "tessera receiver" : "raw receiver")) return {};
  double cpu = 0, msgs = 0;
  std::ifstream(o.dir + "/child-cpu.txt") >> cpu >> msgs >> out.in_place_share;
  if (msgs > 0) out.receiver_cpu_us = cpu * 1e6 / msgs;
  // A tessera receiver must have taken the path its row names: every slice of at least
  // in_place_min_bytes kept in place in row (b), none in the copy-receive diagnostic.
  const bool expected = tessera_mode && mode != 3 && size >= tile::run_limits{}.in_place_min_bytes;
  if (tessera_mode && (expected ? out.in_place_share < 0.999 : out.in_place_share != 0)) {
    std::fprintf(stderr, "tessera-bench-exchange: mode %d at %zu B kept %.1f%% of slices in place, expected %s\n", mode,
                 size, 100 * out.in_place_share, expected ? "all" : "none");
    return {};
  }
  return out;
}

// ---- (c) tessera sync -----------------------------------------------------------------------

struct sync_figures {
  double wall_us_per_step = 0;  // batch wall time / supersteps (median over runs)
  double sync_us_per_step = 0;  // mean over tiles of sync_ns / supersteps (median over runs)
  double cpu_us_per_step = 0;   // CPU of every tile plus the host, per superstep
  bool ok = false;
};

sync_figures measure_tessera_sync(const options& o, uint32_t n) {
  sync_figures f;
  host::tile_group_config cfg;
  cfg.tiles = n;
  cfg.tile_memory = 1 << 20;
  cfg.local_exchange = "ipc";
  cfg.heartbeat_timeout = 10000ms;  // 16 tiles on 2 cores: be patient
  auto g = host::tile_group::start(cfg);
  if (!g) {
    std::fprintf(stderr, "tessera-bench-exchange: cannot start %u tiles: %s\n", n, g.error().to_string().c_str());
    return f;
  }
  std::map<uint32_t, exchange::program> progs;
  exchange::program p;
  p.id = 1;
  for (uint32_t t = 0; t < n; ++t) p.tiles.push_back(t);
  p.steps.resize(o.supersteps);  // empty compute sets, no sends, sync = true
  for (uint32_t t = 0; t < n; ++t) progs[t] = p;
  if (auto st = (*g)->load(progs); !st.ok()) {
    std::fprintf(stderr, "tessera-bench-exchange: load failed: %s\n", st.to_string().c_str());
    return f;
  }
  host::batch_spec b;
  b.program_id = 1;
  std::vector<double> walls, syncs;
  std::vector<pid_t> pids;
  for (const auto& t : (*g)->tiles()) pids.push_back(t.pid);
  auto group_cpu = [&] {
    double c = process_cpu_seconds();
    for (pid_t p : pids) c += other_cpu_seconds(p);
    return c;
  };
  double cpu0 = 0;
  for (int r = -1; r < o.runs; ++r) {  // run -1 is a warm-up
    if (r == 0) cpu0 = group_cpu();
    auto res = (*g)->run(b);
    if (!res) {
      std::fprintf(stderr, "tessera-bench-exchange: run failed: %s\n", res.error().to_string().c_str());
      return f;
    }
    if (r < 0) continue;
    walls.push_back(res->wall_seconds * 1e6 / o.supersteps);
    double s = 0;
    for (const auto& [tile, cs] : res->counters)
      for (const auto& c : cs) s += static_cast<double>(c.sync_ns);
    syncs.push_back(s / 1e3 / n / o.supersteps);
  }
  f.cpu_us_per_step = (group_cpu() - cpu0) * 1e6 / (static_cast<double>(o.supersteps) * o.runs);
  (*g)->shutdown();
  f.wall_us_per_step = median(walls);
  f.sync_us_per_step = median(syncs);
  f.ok = true;
  return f;
}

// ---- (d) plain ZeroMQ barrier ---------------------------------------------------------------

int barrier_worker(const std::string& endpoint, uint64_t warm, uint64_t rounds, const std::string& cpu_file) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  double cpu0 = 0;
  for (uint64_t r = 0; r < rounds; ++r) {
    if (r == warm) cpu0 = process_cpu_seconds();
    s.send(zmq::buffer(&r, sizeof r), zmq::send_flags::none);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::duration_cast<std::chrono::milliseconds>(child_idle_limit)) == 0) return 3;
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::none)) return 4;
  }
  std::ofstream(cpu_file) << (process_cpu_seconds() - cpu0) << "\n";
  return 0;
}

struct barrier_figures {
  double us = 0;       // wall per barrier
  double cpu_us = 0;   // CPU of the coordinator and every worker, per barrier
};

// supersteps warm-up rounds, then `runs` chunks of supersteps rounds; us = the median chunk.
barrier_figures measure_plain_barrier(const options& o, uint32_t n) {
  const std::string endpoint = "ipc://" + o.dir + "/barrier.sock";
  std::filesystem::remove(o.dir + "/barrier.sock");
  const uint64_t warm = o.supersteps, timed = static_cast<uint64_t>(o.supersteps) * o.runs;
  std::vector<pid_t> kids;
  auto cpu_file = [&](uint32_t i) { return o.dir + "/barrier-cpu-" + std::to_string(i) + ".txt"; };
  for (uint32_t i = 0; i < n; ++i)
    kids.push_back(fork_child([&] { return barrier_worker(endpoint, warm, warm + timed, cpu_file(i)); }));
  barrier_figures f;
  double cpu = 0;
  {
    zmq::context_t ctx(1);
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind(endpoint);
    std::vector<zmq::message_t> ids(n);
    steady::time_point chunk0;
    double cpu0 = 0;
    std::vector<double> chunks;  // us per barrier over each run-sized chunk of rounds
    for (uint64_t r = 0; r < warm + timed; ++r) {
      if (r == warm) chunk0 = steady::now(), cpu0 = process_cpu_seconds();
      if (r > warm && (r - warm) % o.supersteps == 0) {
        chunks.push_back(seconds_since(chunk0) * 1e6 / o.supersteps);
        chunk0 = steady::now();
      }
      for (uint32_t i = 0; i < n; ++i) {
        zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::duration_cast<std::chrono::milliseconds>(child_idle_limit)) == 0)
          throw std::runtime_error("barrier workers stopped arriving");
        zmq::message_t body;
        (void)router.recv(ids[i], zmq::recv_flags::none);
        (void)router.recv(body, zmq::recv_flags::none);
      }
      for (uint32_t i = 0; i < n; ++i) {
        router.send(ids[i], zmq::send_flags::sndmore);
        router.send(zmq::buffer(&r, sizeof r), zmq::send_flags::none);
      }
    }
    chunks.push_back(seconds_since(chunk0) * 1e6 / o.supersteps);
    f.us = median(chunks);  // like tessera's: the median over runs of `supersteps` barriers
    cpu = process_cpu_seconds() - cpu0;
  }
  for (pid_t k : kids)
    if (!reap(k, "barrier worker")) f.us = 0;
  for (uint32_t i = 0; i < n; ++i) {
    double c = 0;
    std::ifstream(cpu_file(i)) >> c;
    cpu += c;
  }
  f.cpu_us = cpu * 1e6 / static_cast<double>(timed);
  return f;
}

// ---- diagnostics: barrier algorithms over exchange::zmq_transport, without the tile daemon ----

// N forked processes, each with a zmq_transport (PULL + one PUSH per peer, as a tile has), run
// `rounds` barriers of sync_tokens: either a dissemination barrier (ceil(log2 N) rounds of one
// message each way, superstep_loop.cpp's sync_phase before the tree) or a central one (rank 0
// collects N-1 arrivals, then releases N-1 peers: the tile's tree barrier for N <= 16). Separates the cost of the algorithm from that of the
// tile daemon and host around it.
int transport_barrier_worker(const std::string& dir, uint32_t rank, uint32_t n, bool central, uint64_t warm,
                             uint64_t rounds, const std::string& out_file) {
  zmq::context_t ctx(1);
  auto bound = exchange::zmq_transport::bind(ctx, rank, "ipc://" + dir + "/bar-" + std::to_string(rank) + ".sock");
  if (!bound) return 5;
  auto& t = **bound;
  std::vector<std::string> eps;
  for (uint32_t i = 0; i < n; ++i) eps.push_back("ipc://" + dir + "/bar-" + std::to_string(i) + ".sock");
  if (!t.connect_peers(eps).ok()) return 5;
  using key = std::tuple<uint32_t, uint32_t, uint32_t>;  // (step, round, src)
  std::map<key, exchange::envelope> inbox;
  auto wait_for = [&](const key& k) {
    auto idle = steady::now();
    for (;;) {
      if (auto it = inbox.find(k); it != inbox.end()) return inbox.erase(it), true;
      exchange::envelope e;
      auto got = t.recv(e, 50ms);
      if (!got) return false;
      if (!*got) {
        if (steady::now() - idle > child_idle_limit) return false;
        continue;
      }
      exchange::sync_token s;
      if (!exchange::decode(e, s).ok()) return false;
      inbox.emplace(key{s.superstep, s.round, s.src_tile}, std::move(e));
    }
  };
  auto send = [&](uint32_t to, uint32_t step, uint32_t round) {
    return t.send(to, exchange::encode(exchange::sync_token{1, 1, step, round, rank})).ok();
  };
  steady::time_point chunk0;
  double cpu0 = 0;
  std::vector<double> chunks;
  for (uint32_t step = 0; step < rounds; ++step) {
    if (step == warm) chunk0 = steady::now(), cpu0 = process_cpu_seconds();
    if (step > warm && (step - warm) % warm == 0) {
      chunks.push_back(seconds_since(chunk0));
      chunk0 = steady::now();
    }
    if (central) {
      if (rank == 0) {
        for (uint32_t r = 1; r < n; ++r)
          if (!wait_for({step, 0, r})) return 3;
        for (uint32_t r = 1; r < n; ++r)
          if (!send(r, step, 1)) return 4;
      } else {
        if (!send(0, step, 0) || !wait_for({step, 1, 0})) return 3;
      }
    } else {
      for (uint32_t round = 0, dist = 1; dist < n; ++round, dist <<= 1) {
        if (!send((rank + dist) % n, step, round)) return 4;
        if (!wait_for({step, round, (rank + n - dist) % n})) return 3;
      }
    }
  }
  chunks.push_back(seconds_since(chunk0));
  std::ofstream(out_file) << median(chunks) / static_cast<double>(warm) << " " << (process_cpu_seconds() - cpu0) << "\n";
  std::this_thread::sleep_for(50ms);  // let the last tokens leave before linger-0 close
  return 0;
}

barrier_figures measure_transport_barrier(const options& o, uint32_t n, bool central) {
  const uint64_t warm = o.supersteps, timed = static_cast<uint64_t>(o.supersteps) * o.runs;
  auto out_file = [&](uint32_t i) { return o.dir + "/tbar-" + std::to_string(i) + ".txt"; };
  for (uint32_t i = 0; i < n; ++i) std::filesystem::remove(o.dir + "/bar-" + std::to_string(i) + ".sock");
  std::vector<pid_t> kids;
  for (uint32_t i = 0; i < n; ++i)
    kids.push_back(fork_child(
        [&] { return transport_barrier_worker(o.dir, i, n, central, warm, warm + timed, out_file(i)); }));
  barrier_figures f;
  bool ok = true;
  for (pid_t k : kids) ok &= reap(k, "transport barrier worker");
  if (!ok) return f;
  double wall = 0, cpu = 0;
  for (uint32_t i = 0; i < n; ++i) {
    double w = 0, c = 0;
    std::ifstream(out_file(i)) >> w >> c;
    wall = std::max(wall, w);
    cpu += c;
  }
  f.us = wall * 1e6;  // median chunk, slowest rank
  f.cpu_us = cpu * 1e6 / static_cast<double>(timed);
  return f;
}

// ---- (f) the receive path in process ---------------------------------------------------------

// Hands out prepared envelopes as a socket would (private payloads); sends nothing.
class prepared_transport final : public exchange::transport {
 public:
  std::deque<exchange::envelope> queue;
  uint32_t self() const override { return 1; }
  status send(uint32_t, exchange::envelope&&) override { return status::invalid("the receive bench sends nothing"); }
  result<bool> recv(exchange::envelope& out, std::chrono::milliseconds) override {
    if (queue.empty()) return false;
    out = std::move(queue.front());
    queue.pop_front();
    out.private_payloads = true;
    return true;
  }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
};

struct receive_figures {
  double in_place_us = 0, copy_us = 0, checksum_us = 0;  // per message, best of repeats
};

// Per message: runner.run over batches of prepared slices (in place, then copied), and the
// checksum alone over messages prepared the same way. Messages are filled when prepared
// (untimed), cycling through more bytes than the caches hold, so each is cold when consumed
// as a received one is (ZeroMQ's I/O thread wrote it on whichever core it ran).
receive_figures measure_receive_path(const options& o, size_t size) {
  const uint64_t per_batch = 16;
  const uint64_t batches = std::clamp<uint64_t>((128ull << 20) / size / per_batch, 4, 256);
  std::vector<float> src(size / 4);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 1000) * 0.5f;
  const uint64_t sum = exchange::payload_checksum(src.data(), size);
  auto prepare = [&](prepared_transport& t, uint64_t first_batch) {
    for (uint64_t b = 0; b < batches; ++b)
      for (uint32_t step = 0; step < per_batch; ++step)
        t.queue.push_back(exchange::encode(exchange::exchange_data{1, first_batch + b, step, 0, 1, 0, size / 4, sum},
                                           zmq::message_t(src.data(), size)));
  };
  const exchange::program prog = receive_program(size, per_batch);
  const tile::kernel_registry registry = tile::kernel_registry::with_builtins();
  const double messages = static_cast<double>(batches * per_batch);
  auto run_path = [&](bool in_place) {
    prepared_transport t;
    tile::tile_memory memory(1, 2 * size + (1 << 20));
    if (!memory.allocate({.id = 1, .name = "slice", .shape = {static_cast<int64_t>(size / 4)}}).ok()) return 0.0;
    tile::superstep_runner runner(1, t, memory, registry,
                                  {.in_place_min_bytes = in_place ? tile::run_limits{}.in_place_min_bytes : UINT64_MAX});
    double best = 0;
    for (int r = 0; r < o.repeats; ++r) {
      const uint64_t first = 1 + static_cast<uint64_t>(r) * batches;
      prepare(t, first);
      const auto t0 = steady::now();
      for (uint64_t b = 0; b < batches; ++b)
        if (!runner.run(prog, {.program_id = 1, .batch_id = first + b, .collect_counters = false}, {}).ok()) return 0.0;
      const double us = seconds_since(t0) * 1e6 / messages;
      if (best == 0 || us < best) best = us;
    }
    const bool kept = runner.received_in_place() > 0;
    return kept == (in_place && size >= tile::run_limits{}.in_place_min_bytes) ? best : 0.0;
  };
  receive_figures f;
  f.in_place_us = run_path(true);
  f.copy_us = run_path(false);
  for (int r = 0; r < o.repeats; ++r) {
    prepared_transport t;
    prepare(t, 1);
    volatile uint64_t sink = 0;
    const auto t0 = steady::now();
    for (auto& e : t.queue) sink = sink + exchange::payload_checksum(e.payloads[0].data(), e.payloads[0].size());
    const double us = seconds_since(t0) * 1e6 / messages;
    if (f.checksum_us == 0 || us < f.checksum_us) f.checksum_us = us;
  }
  return f;
}

// ---- report ---------------------------------------------------------------------------------

// (e): bytes per second of `body` over a warm slice, best of `repeats` runs of `seconds` each.
double in_process_rate(const options& o, size_t size, const std::function<void()>& body) {
  double best = 0;
  for (int r = 0; r < o.repeats; ++r) {
    body();  // warm
    uint64_t n = 0;
    const auto t0 = steady::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 16; ++i) body();
      n += 16;
      elapsed = seconds_since(t0);
    } while (elapsed < o.seconds);
    best = std::max(best, static_cast<double>(n * size) / elapsed);
  }
  return best;
}

struct row {
  std::string test, param, baseline, tessera, ratio, target, verdict;
  // CSV numbers
  double base_value = 0, tessera_value = 0, ratio_value = 0, extra_value = 0;
  double base_cpu_us = 0, tessera_cpu_us = 0;  // diagnostics: CPU per message / per barrier
  double raw_receiver_cpu_us = 0, tessera_receiver_cpu_us = 0;  // goodput rows: the receiver's share
  double in_place_share = 0;                                      // goodput rows: of (b)'s payload bytes
  barrier_figures dissemination, central;      // diagnostics: sync rows only
  throughput zero_copy;                        // diagnostics, goodput rows: the copy_frame variant
  throughput copy_receive;                     // diagnostics, goodput rows: receiving by a copy
  std::string unit;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string size_name(size_t s) { return s >= (1 << 20) ? std::to_string(s >> 20) + " MiB" : std::to_string(s >> 10) + " KiB"; }

std::vector<size_t> parse_list(const std::string& s) {
  std::vector<size_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t mult = 1;
    if (item.back() == 'K' || item.back() == 'k') mult = 1024, item.pop_back();
    else if (item.back() == 'M' || item.back() == 'm') mult = 1 << 20, item.pop_back();
    v.push_back(std::stoull(item) * mult);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  options o;
  std::string sizes = "4K,64K,1M", tiles = "2,4,8,16";
  po::options_description desc(
      "tessera-bench-exchange: tessera's exchange goodput vs raw ZeroMQ, and tessera's superstep sync vs a plain\n"
      "ZeroMQ barrier, between real processes on this machine. Prints a markdown table with targets.\n\nOptions");
  desc.add_options()
    ("help,h", "show this help")
    ("quick", "a short run (0.2 s per throughput point, best of 1, 50 supersteps x 2 runs)")
    ("csv", po::value(&o.csv), "also write the rows as CSV to this path")
    ("sizes", po::value(&sizes)->default_value(sizes), "message sizes for (a)/(b), e.g. 4K,64K,1M (multiples of 4)")
    ("tiles", po::value(&tiles)->default_value(tiles), "process counts for (c)/(d)")
    ("seconds", po::value(&o.seconds)->default_value(o.seconds), "time per throughput measurement")
    ("repeats", po::value(&o.repeats)->default_value(o.repeats), "throughput: best of this many measurements")
    ("supersteps", po::value(&o.supersteps)->default_value(o.supersteps), "sync: supersteps per batch (= barrier rounds)")
    ("runs", po::value(&o.runs)->default_value(o.runs), "sync: timed batches per tile count")
    ("part", po::value(&o.part)->default_value(o.part),
     "what to measure: all, exchange ((a)/(b)), sync ((c)/(d)), checksum ((e)) or receive ((f): the tile's receive "
     "path in process, in place vs copied)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) return std::cout << desc << "\n", 0;
    po::notify(vm);
    o.sizes = parse_list(sizes);
    o.tiles.clear();
    for (size_t t : parse_list(tiles)) o.tiles.push_back(static_cast<uint32_t>(t));
  } catch (const std::exception& ex) {
    std::cerr << "tessera-bench-exchange: " << ex.what() << "\n(see --help)\n";
    return 2;
  }
  if (vm.count("quick")) {
    if (vm["seconds"].defaulted()) o.seconds = 0.2;
    if (vm["repeats"].defaulted()) o.repeats = 1;
    if (vm["supersteps"].defaulted()) o.supersteps = 50;
    if (vm["runs"].defaulted()) o.runs = 2;
  }
  for (size_t s : o.sizes)
    if (s == 0 || s % 4 != 0) return std::cerr << "tessera-bench-exchange: --sizes must be positive multiples of 4\n", 2;
  for (uint32_t t : o.tiles)
    if (t < 2 || t > 256) return std::cerr << "tessera-bench-exchange: --tiles must be between 2 and 256\n", 2;
  if (o.part != "all" && o.part != "exchange" && o.part != "sync" && o.part != "checksum" && o.part != "receive")
    return std::cerr << "tessera-bench-exchange: --part must be all, exchange, sync, checksum or receive\n", 2;
  if (o.seconds <= 0 || o.repeats <= 0 || o.supersteps == 0 || o.runs <= 0)
    return std::cerr << "tessera-bench-exchange: --seconds, --repeats, --supersteps and --runs must be positive\n", 2;

  char tmpl[] = "/tmp/tessera-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return std::cerr << "tessera-bench-exchange: cannot create a temp dir\n", 1;
  o.dir = tmpl;
  std::vector<row> rows;
  bool all_ok = true;
  std::fprintf(stderr, "tessera-bench-exchange: %ld cores online; measuring...\n", sysconf(_SC_NPROCESSORS_ONLN));

  const std::vector<size_t> checksum_sizes = o.part == "all" || o.part == "checksum" ? o.sizes : std::vector<size_t>{};
  const std::vector<size_t> receive_sizes = o.part == "all" || o.part == "receive" ? o.sizes : std::vector<size_t>{};
  if (o.part == "sync" || o.part == "checksum" || o.part == "receive") o.sizes.clear();
  if (o.part == "exchange" || o.part == "checksum" || o.part == "receive") o.tiles.clear();
  std::vector<std::pair<size_t, receive_figures>> receive_rows;
  for (size_t size : receive_sizes) {
    receive_rows.emplace_back(size, measure_receive_path(o, size));
    const auto& f = receive_rows.back().second;
    all_ok &= f.in_place_us > 0 && f.copy_us > 0;
    std::fprintf(stderr, "  receive path %zu B: in place %.1f us, copied %.1f us, checksum %.1f us per message\n", size,
                 f.in_place_us, f.copy_us, f.checksum_us);
  }
  for (size_t size : checksum_sizes) {
    std::vector<float> slice(size / 4), copy(size / 4);
    for (size_t i = 0; i < slice.size(); ++i) slice[i] = static_cast<float>(i % 1000) * 0.25f;
    volatile uint64_t sink = 0;
    const double hash = in_process_rate(o, size, [&] { sink = sink + exchange::payload_checksum(slice.data(), size); });
    const double copied = in_process_rate(o, size, [&] {
      std::memcpy(copy.data(), slice.data(), size);
      sink = sink + static_cast<uint64_t>(copy[size / 8]);
    });
    row w;
    w.test = "slice checksum";
    w.param = size_name(size);
    w.base_value = copied / 1e9;
    w.tessera_value = hash / 1e9;
    w.ratio_value = copied > 0 ? hash / copied : 0;
    w.unit = "GB/s";
    w.baseline = fmt("memcpy %.1f GB/s", w.base_value);
    w.tessera = fmt("%.1f GB/s", w.tessera_value);
    w.ratio = fmt("%.2fx memcpy", w.ratio_value);
    w.target = "(info)";
    w.verdict = "info";
    all_ok &= hash > 0;
    rows.push_back(w);
    std::fprintf(stderr, "  checksum %s: %.1f GB/s (memcpy %.1f GB/s)\n", w.param.c_str(), w.tessera_value, w.base_value);
  }
  for (size_t size : o.sizes) {
    double raw = 0, tes = 0;
    throughput raw_best, tes_best, zc_best, cr_best;
    for (int r = 0; r < o.repeats; ++r) {  // interleaved so background load hits both alike
      auto a = measure_throughput(o, 0, size);
      auto b = measure_throughput(o, 1, size);
      auto z = measure_throughput(o, 2, size);
      auto k = measure_throughput(o, 3, size);
      if (a.rate > raw) raw = a.rate, raw_best = a;
      if (b.rate > tes) tes = b.rate, tes_best = b;
      if (z.rate > zc_best.rate) zc_best = z;
      if (k.rate > cr_best.rate) cr_best = k;
    }
    row w;
    w.test = "exchange goodput";
    w.param = size_name(size);
    w.base_value = raw / 1e6;
    w.tessera_value = tes / 1e6;
    w.ratio_value = raw > 0 ? tes / raw : 0;
    w.unit = "MB/s";
    w.base_cpu_us = raw_best.sender_cpu_us + raw_best.receiver_cpu_us;
    w.tessera_cpu_us = tes_best.sender_cpu_us + tes_best.receiver_cpu_us;
    w.raw_receiver_cpu_us = raw_best.receiver_cpu_us;
    w.in_place_share = tes_best.in_place_share;
    w.tessera_receiver_cpu_us = tes_best.receiver_cpu_us;
    w.zero_copy = zc_best;
    w.copy_receive = cr_best;
    w.baseline = fmt("%.0f MB/s", w.base_value);
    w.tessera = fmt("%.0f MB/s", w.tessera_value);
    w.ratio = fmt("%.0f%% of raw", 100 * w.ratio_value);
    if (size >= (64 << 10)) {
      w.target = ">= 80% of raw";
      w.verdict = w.ratio_value >= 0.8 ? "PASS" : "MISS";
    } else {
      w.target = "(none below 64 KiB)";
      w.verdict = "info";
    }
    all_ok &= raw > 0 && tes > 0;
    rows.push_back(w);
    std::fprintf(stderr, "  %s: raw %.0f MB/s (cpu/msg send %.1f us, recv %.1f us), tessera %.0f MB/s (send %.1f us, recv %.1f us)\n",
                 w.param.c_str(), w.base_value, raw_best.sender_cpu_us, raw_best.receiver_cpu_us, w.tessera_value,
                 tes_best.sender_cpu_us, tes_best.receiver_cpu_us);
  }

  for (uint32_t n : o.tiles) {
    barrier_figures pb = measure_plain_barrier(o, n);
    const double plain = pb.us;
    sync_figures f = measure_tessera_sync(o, n);
    barrier_figures dis = measure_transport_barrier(o, n, false);
    barrier_figures cen = measure_transport_barrier(o, n, true);
    row w;
    w.test = "superstep sync";
    w.param = std::to_string(n) + " tiles";
    w.base_value = plain;
    w.tessera_value = f.wall_us_per_step;
    w.extra_value = f.sync_us_per_step;
    w.ratio_value = plain > 0 ? f.wall_us_per_step / plain : 0;
    w.unit = "us/barrier";
    w.base_cpu_us = pb.cpu_us;
    w.tessera_cpu_us = f.cpu_us_per_step;
    w.dissemination = dis;
    w.central = cen;
    w.baseline = fmt("%.1f us", plain);
    w.tessera = fmt("%.1f us", f.wall_us_per_step) + fmt(" (sync_ns %.1f us)", f.sync_us_per_step);
    w.ratio = fmt("%.2fx", w.ratio_value);
    w.target = "<= 1.5x plain";
    w.verdict = w.ratio_value > 0 && w.ratio_value <= 1.5 ? "PASS" : "MISS";
    all_ok &= plain > 0 && f.ok;
    rows.push_back(w);
    std::fprintf(stderr, "  %u tiles: plain %.1f us (cpu %.1f us), tessera %.1f us/step (sync_ns %.1f us, cpu %.1f us)\n",
                 n, plain, pb.cpu_us, f.wall_us_per_step, f.sync_us_per_step, f.cpu_us_per_step);
  }
  std::error_code ec;
  std::filesystem::remove_all(o.dir, ec);

  if (!rows.empty()) {
    std::printf("\n(a)/(b): %.2f s per point, best of %d; (c)/(d): %u supersteps x %d batches, median batch (tessera: batch\n"
                "wall / supersteps; sync_ns = mean over tiles of the tiles' own sync counter; plain: rounds of the same\n"
                "size, median)\n\n",
                o.seconds, o.repeats, o.supersteps, o.runs);
    std::printf("| test | size / tiles | raw ZeroMQ / plain barrier | tessera | ratio | target | result |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const auto& w : rows)
      std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", w.test.c_str(), w.param.c_str(), w.baseline.c_str(),
                  w.tessera.c_str(), w.ratio.c_str(), w.target.c_str(), w.verdict.c_str());
  }
  if (!o.sizes.empty()) {
    std::printf("\nDiagnostics: row (b) with the receiver copying each slice into the arena (as before slices\n"
                "were received in place), and with the sender sending a copy of the slice (copy_frame, as before\n"
                "borrow_frame); everything else as row (b). Beside each, the receiving process's CPU per message\n"
                "(every thread, ZeroMQ's I/O thread included) in the best run.\n\n");
    std::printf("| size | raw | tessera (b), in place | copy receive | copy receive %% of raw | copy_frame send | copy_frame %% of raw |\n"
                "|---|---|---|---|---|---|---|\n");
    for (const auto& w : rows)
      if (w.test == "exchange goodput")
        std::printf("| %s | %.0f MB/s (recv cpu %.0f us) | %.0f MB/s (recv cpu %.0f us) | %.0f MB/s (recv cpu %.0f us) "
                    "| %.0f%% | %.0f MB/s | %.0f%% |\n",
                    w.param.c_str(), w.base_value, w.raw_receiver_cpu_us, w.tessera_value, w.tessera_receiver_cpu_us,
                    w.copy_receive.rate / 1e6, w.copy_receive.receiver_cpu_us,
                    w.base_value > 0 ? 100 * w.copy_receive.rate / 1e6 / w.base_value : 0.0, w.zero_copy.rate / 1e6,
                    w.base_value > 0 ? 100 * w.zero_copy.rate / 1e6 / w.base_value : 0.0);
  }
  if (!receive_rows.empty()) {
    std::printf("\n(f) The tile's receive path alone, in this process (superstep_runner over prepared, cold, ZeroMQ-\n"
                "allocated messages; no sockets, one thread; best of %d). Per message: the whole receive (decode, inbox,\n"
                "checks, then the slice kept in place or copied into the arena, the message freed), and the checksum\n"
                "of the same messages alone.\n\n", o.repeats);
    std::printf("| size | received in place | copied into the arena | copy's share | checksum alone | in place GB/s |\n"
                "|---|---|---|---|---|---|\n");
    for (const auto& [size, f] : receive_rows)
      std::printf("| %s | %.1f us | %.1f us | %.0f%% | %.1f us | %.1f |\n", size_name(size).c_str(), f.in_place_us,
                  f.copy_us, f.copy_us > 0 ? 100 * (f.copy_us - f.in_place_us) / f.copy_us : 0.0, f.checksum_us,
                  f.in_place_us > 0 ? static_cast<double>(size) / f.in_place_us / 1e3 : 0.0);
  }
  if (!o.sizes.empty() || !o.tiles.empty()) {
  std::printf("\nDiagnostics: CPU time (user + system, every process and thread involved) per message (goodput rows)\n"
              "or per barrier (sync rows). On a machine with fewer free cores than processes, wall time follows CPU.\n\n");
  std::printf("| test | size / tiles | raw / plain CPU | tessera CPU | ratio |\n|---|---|---|---|---|\n");
  for (const auto& w : rows)
    if (w.test != "slice checksum") std::printf("| %s | %s | %.1f us | %.1f us | %.2fx |\n", w.test.c_str(), w.param.c_str(), w.base_cpu_us,
                w.tessera_cpu_us, w.base_cpu_us > 0 ? w.tessera_cpu_us / w.base_cpu_us : 0.0);
  }
  if (!o.tiles.empty()) {
    std::printf("\nDiagnostics: the same N processes, each with an exchange::zmq_transport and no tile daemon or\n"
                "host, running a dissemination barrier (the tile's before the tree: N*log2(N) sync_tokens,\n"
                "log2(N) dependent rounds) or a central one over the same sockets (2*(N-1) sync_tokens, 2 hops;\n"
                "what the tile's tree barrier is for N <= its fan-in of 16). Wall and CPU per barrier.\n\n");
    std::printf("| tiles | plain ROUTER barrier | tessera tiles | transport, dissemination | transport, central |\n"
                "|---|---|---|---|---|\n");
    for (const auto& w : rows) {
      if (w.test != "superstep sync") continue;
      std::printf("| %s | %.1f us (cpu %.1f) | %.1f us (cpu %.1f) | %.1f us (cpu %.1f) | %.1f us (cpu %.1f) |\n",
                  w.param.c_str(), w.base_value, w.base_cpu_us, w.tessera_value, w.tessera_cpu_us, w.dissemination.us,
                  w.dissemination.cpu_us, w.central.us, w.central.cpu_us);
    }
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    if (!f) return std::cerr << "tessera-bench-exchange: cannot write " << o.csv << "\n", 1;
    f << "test,param,unit,baseline,tessera,tessera_sync_counter_us,ratio,target,result,baseline_cpu_us,tessera_cpu_us,"
         "transport_dissemination_us,transport_central_us,tessera_copy_frame_send,tessera_copy_receive,"
         "tessera_in_place_share,copy_receive_in_place_share\n";
    for (const auto& w : rows)
      f << w.test << "," << w.param << "," << w.unit << "," << w.base_value << "," << w.tessera_value << ","
        << w.extra_value << "," << w.ratio_value << "," << w.target << "," << w.verdict << "," << w.base_cpu_us
        << "," << w.tessera_cpu_us << "," << w.dissemination.us << "," << w.central.us << ","
        << w.zero_copy.rate / 1e6 << "," << w.copy_receive.rate / 1e6 << "," << w.in_place_share << ","
        << w.copy_receive.in_place_share << "\n";
  }
  return all_ok ? 0 : 1;
}
