// Small synthetic presets with round numbers, so that expected values can be computed by hand.
#pragma once

#include "tessera/timing/preset.hpp"

namespace tessera::timing::testing {

inline ipu_preset round_ipu() {
  ipu_preset p;
  p.name = "round-ipu";
  p.tiles = 4;
  p.memory_bytes_per_tile = 1 << 20;
  p.clock_hz = 1e9;
  p.fp16_flops_per_cycle_per_tile = 128;
  p.fp32_flops_per_cycle_per_tile = 32;
  p.exchange_bytes_per_cycle = 4;
  p.global_sync_cycles = 100;
  p.worker_contexts = 6;
  p.calibration = {10, 0.5, 1.0, 8};  // overhead, amp efficiency, exchange efficiency, vector bytes
  return p;
}

inline gpu_preset round_gpu(bool fusion) {
  gpu_preset p;
  p.name = "round-gpu";
  p.sms = 100;
  p.clock_hz = 1e9;
  p.fp16_tensor_flops_per_s = 100e12;
  p.fp32_flops_per_s = 10e12;
  p.hbm_bytes_per_s = 1e12;
  p.l2_bytes = 1 << 20;
  p.launch_overhead_s = 1e-6;
  p.fusion = fusion;
  p.calibration = {1.0, 1.0, 1.0};
  return p;
}

}  // namespace tessera::timing::testing
