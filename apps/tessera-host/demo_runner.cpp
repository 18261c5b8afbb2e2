#include <cmath>
#include <cstdio>
#include <iostream>

#include "host_app.hpp"
#include "tessera/toys/demo_programs.hpp"

namespace tessera::host::app {
using namespace tessera::toys;

int run_demo(tile_group& g, const demo_options& o) {
  const uint32_t tiles = g.size();
  demo_program d = o.demo == "allreduce"        ? make_allreduce_demo(tiles, o.m * o.n, 7)
                   : o.demo == "matmul-columns" ? make_matmul_demo(matmul_split::columns, tiles, o.m, o.k, o.n, 7)
                   : o.demo == "matmul-inner"   ? make_matmul_demo(matmul_split::inner, tiles, o.m, o.k, o.n, 7)
                                                : make_matmul_demo(matmul_split::rows, tiles, o.m, o.k, o.n, 7);
  if (auto st = g.alloc_many(d.allocations); !st.ok()) return std::cerr << "tessera-host: " << st.to_string() << "\n", 1;
  if (auto st = g.load(d.programs); !st.ok()) return std::cerr << "tessera-host: " << st.to_string() << "\n", 1;
  result<run_result> r = status::internal("no run");
  for (int i = 0; i < o.reps; ++i) {
    r = g.run(d.batch);
    if (!r) return std::cerr << "tessera-host: " << r.error().to_string() << "\n", 1;
  }
  // Check against a plain single-process reference (double accumulation).
  const double max_err = o.demo == "allreduce" ? allreduce_reference_error(d, r->outputs)
                                               : matmul_reference_error(d, assemble_matmul(d, r->outputs));
  std::printf("demo %s on %u tiles: last batch %.3f ms wall, max |error| vs single-process reference %.2e\n",
              o.demo.c_str(), tiles, r->wall_seconds * 1e3, max_err);
  std::printf("%-5s %-9s %12s %12s %12s %12s %12s %12s\n", "tile", "superstep", "compute_us", "exchange_us", "sync_us",
              "sent_B", "received_B", "mem_high_B");
  for (const auto& [tile, cs] : r->counters)
    for (size_t s = 0; s < cs.size(); ++s)
      std::printf("%-5u %-9zu %12.1f %12.1f %12.1f %12llu %12llu %12llu\n", tile, s, cs[s].compute_ns / 1e3,
                  cs[s].exchange_ns / 1e3, cs[s].sync_ns / 1e3, (unsigned long long)cs[s].bytes_sent,
                  (unsigned long long)cs[s].bytes_received, (unsigned long long)r->memory_high_water[tile]);
  const double tolerance = 1e-3 * std::sqrt(double(std::max<int64_t>(o.k, tiles)));
  if (max_err > tolerance) {
    std::cerr << "tessera-host: result differs from the reference by " << max_err << " (> " << tolerance << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace tessera::host::app
