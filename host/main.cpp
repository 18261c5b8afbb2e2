// tessera-host: starts (or awaits) a tile group and runs work on it.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/host/demo_programs.hpp"
#include "tessera/host/tile_group.hpp"

namespace po = boost::program_options;
using namespace tessera;

namespace {

int run_demo(host::tile_group& g, const std::string& demo, int64_t m, int64_t k, int64_t n, int reps) {
  const uint32_t tiles = g.size();
  host::demo_program d = demo == "allreduce" ? host::make_allreduce_demo(tiles, m * n, 7)
                         : demo == "matmul-columns" ? host::make_matmul_demo(host::matmul_split::columns, tiles, m, k, n, 7)
                         : demo == "matmul-inner" ? host::make_matmul_demo(host::matmul_split::inner, tiles, m, k, n, 7)
                                                  : host::make_matmul_demo(host::matmul_split::rows, tiles, m, k, n, 7);
  if (auto st = g.alloc_many(d.allocations); !st) return std::cerr << "tessera-host: " << st.to_string() << "\n", 1;
  if (auto st = g.load(d.programs); !st) return std::cerr << "tessera-host: " << st.to_string() << "\n", 1;
  result<host::run_result> r = status::internal("no run");
  for (int i = 0; i < reps; ++i) {
    r = g.run(d.batch);
    if (!r) return std::cerr << "tessera-host: " << r.error().to_string() << "\n", 1;
  }
  // Check against a plain single-process reference (double accumulation).
  double max_err = 0;
  if (demo == "allreduce") {
    auto xs = host::allreduce_inputs(d);
    for (size_t i = 0; i < xs[0].size(); ++i) {
      double s = 0;
      for (auto& x : xs) s += x[i];
      for (auto& out : r->outputs) max_err = std::max(max_err, std::abs(out[i] - s));
    }
  } else {
    auto c = host::assemble_matmul(d, r->outputs);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += double(d.a[i * k + q]) * d.b[q * n + j];
        max_err = std::max(max_err, std::abs(c[i * n + j] - s));
      }
  }
  std::printf("demo %s on %u tiles: last batch %.3f ms wall, max |error| vs single-process reference %.2e\n",
              demo.c_str(), tiles, r->wall_seconds * 1e3, max_err);
  std::printf("%-5s %-9s %12s %12s %12s %12s %12s %12s\n", "tile", "superstep", "compute_us", "exchange_us", "sync_us",
              "sent_B", "received_B", "mem_high_B");
  for (const auto& [tile, cs] : r->counters)
    for (size_t s = 0; s < cs.size(); ++s)
      std::printf("%-5u %-9zu %12.1f %12.1f %12.1f %12llu %12llu %12llu\n", tile, s, cs[s].compute_ns / 1e3,
                  cs[s].exchange_ns / 1e3, cs[s].sync_ns / 1e3, (unsigned long long)cs[s].bytes_sent,
                  (unsigned long long)cs[s].bytes_received, (unsigned long long)r->memory_high_water[tile]);
  const double tolerance = 1e-3 * std::sqrt(double(std::max<int64_t>(k, tiles)));
  if (max_err > tolerance) {
    std::cerr << "tessera-host: result differs from the reference by " << max_err << " (> " << tolerance << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  log::set_prefix("host");
  host::tile_group_config cfg;
  std::string memory = "256MiB", demo = "matmul";
  int64_t m = 512, k = 256, n = 256, register_ms = 20000, heartbeat_timeout_ms = 3000;
  int reps = 3;
  po::options_description opts(
      "tessera-host: compiles work onto a group of tile processes and runs it\n\nOptions");
  opts.add_options()
    ("help,h", "show this help")
    ("tiles", po::value(&cfg.tiles)->default_value(4), "number of tiles in the group")
    ("tile-memory", po::value(&memory)->default_value(memory), "memory cap of each tile (e.g. 624KiB, 64MiB)")
    ("exchange", po::value(&cfg.local_exchange)->default_value("ipc"), "local tiles' exchange transport: ipc or tcp")
    ("control", po::value(&cfg.control_bind)->default_value(cfg.control_bind), "the host's control endpoint to bind")
    ("advertise", po::value(&cfg.advertise_host), "address tiles dial when --control binds a wildcard")
    ("external", "do not launch tiles; wait for tiles started elsewhere (ssh, Slurm) to register")
    ("register-timeout-ms", po::value(&register_ms)->default_value(register_ms), "how long to wait for tiles to register")
    ("heartbeat-timeout-ms", po::value(&heartbeat_timeout_ms)->default_value(heartbeat_timeout_ms), "declare a silent tile failed after this")
    ("log-dir", po::value(&cfg.launcher.log_dir), "write each local tile's log to DIR/tile-N.log")
    ("pin-cores", "pin local tiles to cores round-robin")
    ("demo", po::value(&demo)->default_value(demo), "demo program: matmul (rows split), matmul-columns, matmul-inner, allreduce")
    ("m", po::value(&m)->default_value(m), "demo: rows of A")
    ("k", po::value(&k)->default_value(k), "demo: inner dimension")
    ("n", po::value(&n)->default_value(n), "demo: columns of B")
    ("reps", po::value(&reps)->default_value(reps), "demo: batches to run");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) return std::cout << opts << "\n", 0;
    po::notify(vm);
  } catch (const std::exception& ex) {
    std::cerr << "tessera-host: " << ex.what() << "\n(see tessera-host --help)\n";
    return 2;
  }
  auto bytes = parse_bytes(memory);
  if (!bytes) return std::cerr << "tessera-host: --tile-memory: " << bytes.error().message() << "\n", 2;
  if (m <= 0 || k <= 0 || n <= 0 || reps <= 0) return std::cerr << "tessera-host: --m, --k, --n and --reps must be positive\n", 2;
  if (demo != "matmul" && demo != "matmul-columns" && demo != "matmul-inner" && demo != "allreduce")
    return std::cerr << "tessera-host: unknown --demo '" << demo << "'; use matmul, matmul-columns, matmul-inner or allreduce\n", 2;
  cfg.tile_memory = *bytes;
  cfg.launch_local = !vm.count("external");
  cfg.launcher.pin_cores = vm.count("pin-cores") > 0;
  cfg.register_timeout = std::chrono::milliseconds(register_ms);
  cfg.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  if (!cfg.launch_local) std::cerr << "tessera-host: waiting for " << cfg.tiles << " tiles to register\n";
  auto g = host::tile_group::start(cfg);
  if (!g) return std::cerr << "tessera-host: " << g.error().to_string() << "\n", 1;
  if (!cfg.launch_local) std::cerr << "tessera-host: control endpoint " << (*g)->control_endpoint() << "\n";
  int rc = run_demo(**g, demo, m, k, n, reps);
  (*g)->shutdown();
  return rc;
}
