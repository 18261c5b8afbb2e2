// tessera-tile: one emulated tile. Usually started by tessera-host or a launcher script.
#include <signal.h>

#include <csignal>
#include <iostream>
#include <boost/program_options.hpp>
#include <sys/prctl.h>

#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/tile/tile_daemon.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  tessera::log::init_from_env();
  po::options_description opts("tessera-tile: one emulated tile process (hard-capped memory, own compute)\nOptions");
  std::string memory = "256MiB";
  int64_t heartbeat_ms = 200, exchange_timeout_ms = 30000, silence_ms = 0;
  tessera::tile::tile_config cfg;
  std::string keys_dir, make_keys_dir;
  opts.add_options()
    ("help,h", "show this help")
    ("host", po::value(&cfg.host_endpoint), "the host's control endpoint, e.g. tcp://10.0.0.1:5555 (required)")
    ("tile-id", po::value(&cfg.tile_id), "this tile's id in the group (0-based, required)")
    ("keys", po::value(&keys_dir), "CurveZMQ key directory (from --make-keys): encrypt and authenticate every socket")
    ("insecure", "allow plain sockets across machines (no --keys); only on a trusted network")
    ("make-keys", po::value(&make_keys_dir), "write a new cluster key directory (host, tile and GPU key pairs) and exit; a directory made before the GPU pair gets the GPU pair alone")
    ("incarnation", po::value(&cfg.incarnation)->default_value(0), "restart count of this tile id")
    ("memory", po::value(&memory)->default_value(memory), "tile memory capacity (e.g. 624KiB, 64MiB)")
    ("exchange-bind", po::value(&cfg.exchange_bind)->default_value(cfg.exchange_bind),
     "where to bind the exchange socket (ipc:///path or tcp://addr:port; port 0 = any)")
    ("advertise", po::value(&cfg.advertise_host), "address peers use to reach a tcp exchange socket")
    ("heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms), "heartbeat interval")
    ("exchange-timeout-ms", po::value(&exchange_timeout_ms)->default_value(exchange_timeout_ms),
     "fail a run when a slice or barrier takes longer")
    ("host-silence-ms", po::value(&silence_ms)->default_value(silence_ms), "exit (status 1) after this long without a word from the host, which sends a keepalive every second (0 = never)")
    ("threads", po::value(&cfg.compute_threads)->default_value(1), "compute threads of this tile")
    ("faults", po::value(&cfg.faults), "fault plan to apply (JSON text or a file; see exchange/fault_plan.hpp)")
    ("die-with-parent", "exit when the parent process exits (local launches)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-tile", argc, argv, opts, vm)) return *done;
  if (!vm.count("make-keys") && (!vm.count("host") || !vm.count("tile-id"))) {
    std::cerr << "tessera-tile: --host and --tile-id are required; see tessera-tile --help\n";
    return 2;
  }
  if (vm.count("make-keys")) {
    auto made = tessera::exchange::make_keys(make_keys_dir);
    if (!made) {
      std::cerr << "tessera-tile: --make-keys: " << made.error().message() << "\n";
      return 2;
    }
    std::cout << "keys in " << make_keys_dir << ":";
    for (const auto& f : *made) std::cout << " " << f;
    std::cout << "\n";
    return 0;
  }
  if (!keys_dir.empty()) {
    auto sec = tessera::exchange::load_security(keys_dir, tessera::exchange::security_role::tile);
    if (!sec) return std::cerr << "tessera-tile: --keys: " << sec.error().message() << "\n", 2;
    tessera::exchange::set_process_security(*sec);
  } else if (!vm.count("insecure") && (!tessera::exchange::is_loopback_endpoint(cfg.host_endpoint) ||
                                       !tessera::exchange::is_loopback_endpoint(cfg.exchange_bind))) {
    std::cerr << "tessera-tile: " << cfg.host_endpoint << " / " << cfg.exchange_bind
              << " leave this machine: pass --keys DIR (made by tessera-tile --make-keys DIR) or --insecure\n";
    return 2;
  }
  auto bytes = tessera::parse_bytes(memory);
  if (!bytes) {
    std::cerr << "tessera-tile: --memory: " << bytes.error().message() << "\n";
    return 2;
  }
  cfg.memory_capacity = *bytes;
  cfg.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  cfg.exchange_timeout = std::chrono::milliseconds(exchange_timeout_ms);
  cfg.host_silence_limit = std::chrono::milliseconds(silence_ms);
  // A blocked signal mask survives exec: whatever the launcher blocked, this tile takes SIGTERM
  // and SIGINT (else --die-with-parent's SIGTERM stays pending and the tile outlives its host).
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
  std::signal(SIGTERM, [](int) { tessera::tile::tile_daemon::request_stop(); });
  std::signal(SIGINT, [](int) { tessera::tile::tile_daemon::request_stop(); });
  if (vm.count("die-with-parent")) prctl(PR_SET_PDEATHSIG, SIGTERM);
  tessera::tile::tile_daemon daemon(cfg);
  return daemon.run();
}
