// tessera/timing/gpu_roofline.hpp: modelled GPU time, a roofline per kernel launch.
//
//   t(kernel) = max(tensor_flops / (peak(dtype) * tensor_core_efficiency)
//                   + vector_flops / (fp32 peak * fp32_efficiency),
//                   hbm_bytes / (hbm_bytes_per_s * hbm_efficiency))
//               + launch_overhead_s
//
// Queries are turned into launches by their estimators; with fusion (preset.fusion, or the
// override) elementwise epilogues (bias, GELU, residual add, scale) fold into the preceding GEMM
// and attention runs as one fused kernel, as TensorRT does. Without fusion every op is a launch.
//
// Usage:
//   auto a100 = tessera::timing::load_gpu_preset("a100-40gb");
//   std::vector<tessera::timing::kernel_query> ops = ...;   // e.g. bert_forward_ops(...)
//   auto est = tessera::timing::estimate_gpu_ops(*a100, ops);
//   double ms = est->seconds * 1e3;
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/estimator.hpp"
#include "tessera/timing/kernel_query.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

/// The modelled time of one launch.
struct gpu_kernel_time {
  std::string name;
  double compute_s = 0;  ///< FLOP-limited time
  double memory_s = 0;   ///< HBM-limited time
  double seconds = 0;    ///< max(compute_s, memory_s) + launch overhead
  bool memory_bound = false;
};

/// The modelled time of a stream of launches.
struct gpu_estimate {
  double seconds = 0;
  int64_t launches = 0;
  double flops = 0;      ///< tensor + vector FLOPs
  double hbm_bytes = 0;
  bool fused = false;
  std::vector<gpu_kernel_time> kernels;
};

/// Time of one launch of `w` with elements of type `t`.
gpu_kernel_time gpu_kernel_seconds(const gpu_preset& p, const gpu_kernel_work& w, dtype t);

/// Time of `ops` run back to back on one GPU; `fusion` overrides p.fusion when set.
result<gpu_estimate> estimate_gpu_ops(const gpu_preset& p, std::span<const kernel_query> ops,
                                      std::optional<bool> fusion = std::nullopt,
                                      const estimator_registry& r = estimator_registry::builtin());

}  // namespace tessera::timing
