#include "matmul_plan.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tessera::timing::detail {
namespace {

std::vector<int64_t> split_candidates(int64_t tiles, int64_t dim) {
  std::set<int64_t> c;
  for (int64_t x = 1; x <= tiles; x *= 2) c.insert(x), c.insert(3 * x);
  for (int64_t d = 1; d <= tiles; ++d)
    if (tiles % d == 0) c.insert(d);
  std::vector<int64_t> out;
  for (int64_t x : c)
    if (x <= tiles && x <= dim) out.push_back(x);
  return out;
}

double exchange_cycles_of(double bytes, const ipu_preset& p) {
  return bytes / (p.exchange_bytes_per_cycle * p.calibration.exchange_efficiency);
}

matmul_plan evaluate(int64_t m, int64_t n, int64_t k, int64_t mb, int64_t nb, int64_t kb, dtype t,
                     const ipu_preset& p, bool right_stationary) {
  const double b = static_cast<double>(dtype_bytes(t));
  const double mt = std::ceil(double(m) / mb), nt = std::ceil(double(n) / nb), kt = std::ceil(double(k) / kb);
  matmul_plan plan{mb, nb, kb};
  plan.compute_cycles = p.calibration.compute_set_overhead_cycles + amp_cycles(mt, nt, kt, t, p);
  double bytes = mt * kt * b;                                   // left block (activations)
  if (!right_stationary || mb > 1) bytes += kt * nt * b;        // right block, unless resident
  double extra_sync = 0;
  if (kb > 1) {
    // Reduce kb fp32 partials of each output block: the tile owning 1/kb of the block
    // receives (kb - 1) partial slices of it, then adds them on its vector unit.
    const double slice = mt * nt / kb;
    bytes += slice * (kb - 1) * 4.0;
    double lanes = p.calibration.vector_bytes_per_cycle / 4.0;
    plan.compute_cycles += p.calibration.compute_set_overhead_cycles + std::ceil(slice * (kb - 1) / lanes);
    extra_sync = static_cast<double>(p.global_sync_cycles);
  }
  plan.exchange_bytes = bytes;
  plan.total_cycles = plan.compute_cycles + exchange_cycles_of(bytes, p) + extra_sync;
  return plan;
}

}  // namespace

std::string matmul_plan::to_string() const {
  return "m/" + std::to_string(mb) + " n/" + std::to_string(nb) + " k/" + std::to_string(kb);
}

double amp_cycles(double m, double n, double k, dtype t, const ipu_preset& p) {
  return std::ceil(2.0 * m * n * k / p.flops_per_cycle_per_tile(t)) / p.calibration.amp_efficiency;
}

matmul_plan plan_matmul(int64_t m, int64_t n, int64_t k, dtype t, const ipu_preset& p, int64_t tiles,
                        bool right_stationary) {
  // Plans repeat (every layer has the same shapes): memoise on everything the plan depends on.
  using key_t = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, double, double, double, double, double, double>;
  struct key_hash {
    size_t operator()(const key_t& x) const {
      size_t h = 0;
      auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
      mix(std::get<0>(x)), mix(std::get<1>(x)), mix(std::get<2>(x)), mix(std::get<3>(x));
      return h;
    }
  };
  static std::mutex mu;
  static std::unordered_map<key_t, matmul_plan, key_hash> cache;
  const key_t key{m, n, k, tiles, right_stationary, p.flops_per_cycle_per_tile(t) + 1e6 * int(t),
                  p.calibration.amp_efficiency, p.exchange_bytes_per_cycle * p.calibration.exchange_efficiency,
                  double(p.global_sync_cycles), p.calibration.compute_set_overhead_cycles,
                  p.calibration.vector_bytes_per_cycle};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  matmul_plan best = evaluate(m, n, k, 1, 1, 1, t, p, right_stationary);
  auto ms = split_candidates(tiles, m), ns = split_candidates(tiles, n), ks = split_candidates(tiles, k);
  for (int64_t mb : ms)
    for (int64_t nb : ns) {
      if (mb * nb > tiles) break;
      for (int64_t kb : ks) {
        if (mb * nb * kb > tiles) break;
        matmul_plan c = evaluate(m, n, k, mb, nb, kb, t, p, right_stationary);
        if (c.total_cycles < best.total_cycles) best = c;
      }
    }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 100000) cache.clear();
  cache.emplace(key, best);
  return best;
}

}  // namespace tessera::timing::detail
