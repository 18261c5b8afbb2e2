#include "tessera/timing/gpu_roofline.hpp"

#include <algorithm>

namespace tessera::timing {

gpu_kernel_time gpu_kernel_seconds(const gpu_preset& p, const gpu_kernel_work& w, dtype t) {
  gpu_kernel_time k;
  k.name = w.name;
  const double tensor_peak = p.peak_flops_per_s(t) *
                             (t == dtype::fp16 ? p.calibration.tensor_core_efficiency : p.calibration.fp32_efficiency);
  const double vector_peak = p.fp32_flops_per_s * p.calibration.fp32_efficiency;
  k.compute_s = w.tensor_flops / tensor_peak + w.vector_flops / vector_peak;
  // Fewer blocks than SMs: only `blocks` SMs compute (one wave, each block on its own SM).
  if (w.blocks > 0 && p.sms > 0 && w.blocks < double(p.sms)) k.compute_s *= double(p.sms) / w.blocks;
  k.memory_s = w.hbm_bytes / (p.hbm_bytes_per_s * p.calibration.hbm_efficiency);
  k.memory_bound = k.memory_s > k.compute_s;
  k.seconds = std::max(k.compute_s, k.memory_s) + p.launch_overhead_s;
  return k;
}

result<gpu_estimate> estimate_gpu_ops(const gpu_preset& p, std::span<const kernel_query> ops,
                                      std::optional<bool> fusion, const estimator_registry& r) {
  gpu_estimate est;
  est.fused = fusion.value_or(p.fusion);
  // Build the launch list first (fusing epilogues into the previous GEMM), then time it.
  struct launch {
    gpu_kernel_work work;
    dtype type;
  };
  std::vector<launch> launches;
  for (const kernel_query& q : ops) {
    auto works = estimate_gpu_work(q, est.fused, r);
    if (!works) return works.error().with_context("GPU work of " + q.to_string());
    for (gpu_kernel_work& w : *works) {
      if (est.fused && w.fusable_epilogue && !launches.empty() && launches.back().work.tensor_flops > 0) {
        gpu_kernel_work& gemm = launches.back().work;
        gemm.vector_flops += w.vector_flops;
        gemm.hbm_bytes += w.epilogue_bytes;
        gemm.name += "+" + w.name;
        continue;
      }
      launches.push_back({std::move(w), q.type});
    }
  }
  for (const launch& l : launches) {
    gpu_kernel_time k = gpu_kernel_seconds(p, l.work, l.type);
    est.seconds += k.seconds;
    est.flops += l.work.tensor_flops + l.work.vector_flops;
    est.hbm_bytes += l.work.hbm_bytes;
    est.kernels.push_back(std::move(k));
  }
  est.launches = static_cast<int64_t>(launches.size());
  return est;
}

}  // namespace tessera::timing
