// tessera-tile: one emulated tile. Usually started by tessera-host or a launcher script.
#include <csignal>
#include <iostream>
#include <boost/program_options.hpp>
#include <sys/prctl.h>

#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/tile/tile_daemon.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  tessera::log::init_from_env();
  po::options_description opts("tessera-tile: one emulated tile process (hard-capped memory, own compute)\nOptions");
  std::string memory = "256MiB";
  int64_t heartbeat_ms = 200, exchange_timeout_ms = 30000, silence_ms = 0;
  tessera::tile::tile_config cfg;
  opts.add_options()
    ("help,h", "show this help")
    ("host", po::value(&cfg.host_endpoint)->required(), "the host's control endpoint, e.g. tcp://10.0.0.1:5555")
    ("tile-id", po::value(&cfg.tile_id)->required(), "this tile's id in the group (0-based)")
    ("incarnation", po::value(&cfg.incarnation)->default_value(0), "restart count of this tile id")
    ("memory", po::value(&memory)->default_value(memory), "tile memory capacity (e.g. 624KiB, 64MiB)")
    ("exchange-bind", po::value(&cfg.exchange_bind)->default_value(cfg.exchange_bind),
     "where to bind the exchange socket (ipc:///path or tcp://addr:port; port 0 = any)")
    ("advertise", po::value(&cfg.advertise_host), "address peers use to reach a tcp exchange socket")
    ("heartbeat-ms", po::value(&heartbeat_ms)->default_value(heartbeat_ms), "heartbeat interval")
    ("exchange-timeout-ms", po::value(&exchange_timeout_ms)->default_value(exchange_timeout_ms),
     "fail a run when a slice or barrier takes longer")
    ("host-silence-ms", po::value(&silence_ms)->default_value(silence_ms), "exit after this long without the host (0 = never)")
    ("threads", po::value(&cfg.compute_threads)->default_value(1), "compute threads of this tile")
    ("die-with-parent", "exit when the parent process exits (local launches)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const std::exception& ex) {
    std::cerr << "tessera-tile: " << ex.what() << "\n" << opts << "\n";
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
  if (vm.count("die-with-parent")) prctl(PR_SET_PDEATHSIG, SIGTERM);
  std::signal(SIGTERM, [](int) { tessera::tile::tile_daemon::request_stop(); });
  std::signal(SIGINT, [](int) { tessera::tile::tile_daemon::request_stop(); });
  tessera::tile::tile_daemon daemon(cfg);
  return daemon.run();
}
