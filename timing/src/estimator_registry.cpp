#include <cmath>

#include "builtin_kernels.hpp"
#include "tessera/timing/estimator.hpp"

namespace tessera::timing {

const estimator_registry& estimator_registry::builtin() {
  static const estimator_registry r = with_builtins();
  return r;
}

estimator_registry estimator_registry::with_builtins() {
  estimator_registry r;
  detail::add_builtin_kernels(r);
  return r;
}

status estimator_registry::add(kernel_estimator e) {
  if (e.name.empty()) return status::invalid("kernel estimator has no name");
  if (!e.ipu_cycles || !e.gpu_work)
    return status::invalid("kernel estimator '" + e.name + "' needs both ipu_cycles and gpu_work");
  if (by_name_.count(e.name) != 0)
    return status::invalid("kernel estimator '" + e.name + "' is already registered");
  std::string name = e.name;
  by_name_.emplace(std::move(name), std::move(e));
  return ok_status();
}

result<const kernel_estimator*> estimator_registry::find(std::string_view kernel) const {
  auto it = by_name_.find(kernel);
  if (it != by_name_.end()) return &it->second;
  std::string known;
  for (const auto& [name, _] : by_name_) known += (known.empty() ? "" : ", ") + name;
  return status::not_found("no cycle estimator for kernel '" + std::string(kernel) + "'; known kernels: " + known);
}

std::vector<std::string> estimator_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : by_name_) out.push_back(name);
  return out;
}

result<double> estimate_tile_cycles(const kernel_query& q, const ipu_preset& p, double physical_tiles,
                                    const estimator_registry& r) {
  if (!(physical_tiles >= 1.0))
    return status::invalid("physical_tiles must be >= 1 (an emulated tile stands for one or more tiles)");
  auto e = r.find(q.kernel);
  if (!e) return e.error();
  return (*e)->ipu_cycles(q, p, physical_tiles);
}

result<spread_cost> estimate_spread(const kernel_query& q, const ipu_preset& p, int64_t tiles,
                                    const estimator_registry& r) {
  if (tiles < 1) return status::invalid("a kernel must be spread over at least one tile");
  auto e = r.find(q.kernel);
  if (!e) return e.error();
  const kernel_estimator& est = **e;
  if (est.ipu_spread) return est.ipu_spread(q, p, tiles);
  auto cycles = est.ipu_cycles(q, p, static_cast<double>(tiles));
  if (!cycles) return cycles.error();
  spread_cost c;
  c.compute_cycles = *cycles;
  c.plan = "elementwise/" + std::to_string(tiles);
  if (est.relayout_bytes) {
    auto bytes = est.relayout_bytes(q);
    if (!bytes) return bytes.error();
    c.exchange_bytes = *bytes / static_cast<double>(tiles);
  }
  return c;
}

result<std::vector<gpu_kernel_work>> estimate_gpu_work(const kernel_query& q, bool fused,
                                                       const estimator_registry& r) {
  auto e = r.find(q.kernel);
  if (!e) return e.error();
  return (*e)->gpu_work(q, fused);
}

double vector_cycles(double overhead, double work, double tiles, double width, double cycles_per_vector) {
  const double per_tile = std::ceil(work / tiles);
  return overhead + std::ceil(per_tile / width) * cycles_per_vector;
}

}  // namespace tessera::timing
