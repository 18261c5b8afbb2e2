// tessera/timing/bert_model.hpp: modelled time of one BERT batch on a GPU or an IPU-like chip.
//
// GPU: the batch is padded to its longest sequence (fixed-shape GPU batching) and every kernel of
// bert_forward_ops is costed by the roofline (gpu_roofline.hpp), fused if the preset says so.
//
// IPU: the chip's tiles_used tiles form groups of tensor_parallel_width tiles; each group holds a
// copy of the weights spread over its tiles and runs a share of the batch's sequences (balanced
// by tokens). Every kernel is one superstep over the group's tiles: compute (matmuls split by a
// poplin-style planner, elementwise work spread evenly), one global sync, and the exchange of
// the activations it needs. The batch takes as long as the slowest group. The batch is run as
// given: packed (no padding) unless bert_batch::pad_to is set.
//
// Usage:
//   auto shape = *models::shape_preset("bert-base");
//   auto a100 = *load_gpu_preset("a100-40gb");
//   double gpu_s = *model_gpu_batch_seconds(a100, shape, bert_batch::uniform(32, 128), dtype::fp16);
//   auto c600 = *load_ipu_preset("ipu-c600");
//   auto ipu = model_ipu_batch(c600, shape, bert_batch::uniform(40, 384), dtype::fp16, {});
//   std::cout << ipu->seconds << " s; " << ipu->note << "\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/bert_ops.hpp"
#include "tessera/timing/gpu_roofline.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

/// Modelled GPU time of one forward of `batch` (padded to its longest sequence, or to pad_to).
result<gpu_estimate> model_gpu_batch(const gpu_preset& p, const model_shape& shape, const bert_batch& batch, dtype t);
/// Same, seconds only (costs one encoder layer and counts it `layers` times: the same number).
result<double> model_gpu_batch_seconds(const gpu_preset& p, const model_shape& shape, const bert_batch& batch,
                                       dtype t);
/// Seconds of one forward of `batch` as given, without padding it to its longest (a padding-free GPU
/// runtime: the GEMMs over the packed tokens, attention per sequence).
result<double> model_gpu_forward_seconds(const gpu_preset& p, const model_shape& shape, const bert_batch& batch,
                                         dtype t);

/// How a model is laid out on an IPU-like chip.
struct ipu_mapping {
  int64_t tiles_used = 0;             ///< tiles of the chip in use; 0 = all
  int64_t tensor_parallel_width = 0;  ///< tiles one copy of the model is spread over; 0 = tiles_used
};

/// One superstep of the slowest group.
struct ipu_op_time {
  std::string kernel;
  std::string plan;
  double compute_cycles = 0;
  double sync_cycles = 0;
  double exchange_cycles = 0;
};

/// Modelled IPU time of one batch, and where it goes.
struct ipu_batch_estimate {
  double seconds = 0;
  double compute_s = 0;   ///< slowest group: sum of compute phases
  double sync_s = 0;
  double exchange_s = 0;
  int64_t supersteps = 0;
  int64_t groups = 1;     ///< model copies (data parallel)
  int64_t tensor_parallel_width = 0;
  int64_t tiles_used = 0;
  double memory_bytes_per_tile = 0;  ///< weights + live activations, busiest tile
  std::string note;                  ///< human-readable mapping summary
  std::vector<ipu_op_time> ops;      ///< supersteps of the slowest group
};

/// Modelled IPU time of one forward of `batch`. A mapping whose tiles would overflow their
/// memory is out_of_memory, naming the per-tile need.
result<ipu_batch_estimate> model_ipu_batch(const ipu_preset& p, const model_shape& shape, const bert_batch& batch,
                                           dtype t, const ipu_mapping& mapping = {});
/// Same, seconds only.
result<double> model_ipu_batch_seconds(const ipu_preset& p, const model_shape& shape, const bert_batch& batch,
                                       dtype t, const ipu_mapping& mapping = {});

}  // namespace tessera::timing
