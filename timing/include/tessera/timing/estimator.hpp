// tessera/timing/estimator.hpp: cycle estimators, registered by kernel name (PopLibs style).
//
// Every kernel the tile programs run has one estimator: a Poplar-style tile cycle count
// (fixed overhead + ceil(work / vector width) x cycles per vector), the GPU work it costs
// (FLOPs and HBM bytes, unfused or fused form, for the roofline) and the bytes it must pull in
// from other tiles when it is spread over a whole chip. The functional kernels know nothing of
// this; they only hand a kernel_query to the timing layer.
//
// Usage:
//   using namespace tessera::timing;
//   auto ipu = load_ipu_preset("ipu-mk2");
//   kernel_query q("linear", {{"tokens", 128}, {"in", 768}, {"out", 768}});
//   // an emulated tile standing for 184 physical tiles (1472 / 8 processes):
//   result<double> cycles = estimate_tile_cycles(q, *ipu, 184.0);
//   auto names = estimator_registry::builtin().names();   // "add", "attention", ...
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/kernel_query.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

/// One GPU kernel launch as the roofline sees it.
struct gpu_kernel_work {
  std::string name;          ///< e.g. "linear", "attention.qk"
  double tensor_flops = 0;   ///< GEMM FLOPs (tensor cores for fp16)
  double vector_flops = 0;   ///< elementwise FLOPs (CUDA cores)
  double hbm_bytes = 0;      ///< bytes read + written through HBM when run as its own kernel
  /// An elementwise op a fused GEMM epilogue absorbs (bias, GELU, residual add, scale).
  bool fusable_epilogue = false;
  /// HBM bytes it still costs once absorbed (a residual add still reads its other operand).
  double epilogue_bytes = 0;
  /// Thread blocks the kernel launches when fewer than the GPU's SMs can occupy it (0: it fills the
  /// GPU). A fused attention kernel runs one block per (sequence, head), looping over the query
  /// tiles inside the block, so with batch x heads < SMs only that many SMs compute.
  double blocks = 0;
};

/// Per-tile cost of a kernel spread evenly over a number of physical tiles.
struct spread_cost {
  double compute_cycles = 0;  ///< the busiest tile's compute cycles
  double exchange_bytes = 0;  ///< bytes the busiest tile receives in the exchange before it
  std::string plan;           ///< how it was split, e.g. "m/16 n/23 k/4"
};

/// The estimator of one kernel. Only `ipu_cycles` and `gpu_work` are required.
struct kernel_estimator {
  std::string name;    ///< the kernel name tile programs use
  std::string params;  ///< documentation: "tokens, in, out"
  /// Cycles of one tile when the kernel's work is split over `tiles` physical tiles (>= 1,
  /// may be fractional: an emulated tile standing for 1472/N physical tiles).
  std::function<result<double>(const kernel_query&, const ipu_preset&, double tiles)> ipu_cycles;
  /// The GPU launches of this kernel; `fused` selects the fused (TensorRT-like) form.
  std::function<result<std::vector<gpu_kernel_work>>(const kernel_query&, bool fused)> gpu_work;
  /// Optional: cost when spread over `tiles` tiles of a chip, including the exchange that feeds it
  /// (matmul-like kernels plan a split). When absent: compute = ipu_cycles(q, p, tiles),
  /// exchange = relayout_bytes(q) / tiles.
  std::function<result<spread_cost>(const kernel_query&, const ipu_preset&, int64_t tiles)> ipu_spread;
  /// Optional: bytes that must move between tiles before the kernel runs in a whole-chip layout
  /// (0 for elementwise kernels that keep their producer's layout).
  std::function<result<double>(const kernel_query&)> relayout_bytes;
};

/// Name -> estimator. builtin() holds every kernel listed in kernel_query.hpp.
class estimator_registry {
 public:
  /// The built-in kernels; built once, read-only, safe from any thread.
  static const estimator_registry& builtin();
  /// A fresh registry holding copies of the built-ins, to which users may add their own.
  static estimator_registry with_builtins();

  /// Registers an estimator; a duplicate or incomplete one is invalid_argument.
  status add(kernel_estimator e);
  /// The estimator of `kernel`; not_found lists the known names.
  result<const kernel_estimator*> find(std::string_view kernel) const;
  /// Registered names, sorted.
  std::vector<std::string> names() const;

 private:
  std::map<std::string, kernel_estimator, std::less<>> by_name_;
};

/// Cycles of one tile running `q` with its work split over `physical_tiles` tiles of `p`.
result<double> estimate_tile_cycles(const kernel_query& q, const ipu_preset& p, double physical_tiles = 1,
                                    const estimator_registry& r = estimator_registry::builtin());
/// Per-tile compute and exchange of `q` spread over `tiles` tiles of `p`.
result<spread_cost> estimate_spread(const kernel_query& q, const ipu_preset& p, int64_t tiles,
                                    const estimator_registry& r = estimator_registry::builtin());
/// GPU launches of `q` (fused or not).
result<std::vector<gpu_kernel_work>> estimate_gpu_work(const kernel_query& q, bool fused,
                                                       const estimator_registry& r = estimator_registry::builtin());

/// The Poplar-style estimate: overhead + ceil(ceil(work / tiles) / width) * cycles_per_vector.
double vector_cycles(double overhead, double work, double tiles, double width, double cycles_per_vector);

}  // namespace tessera::timing
