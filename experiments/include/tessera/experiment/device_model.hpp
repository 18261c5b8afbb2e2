// tessera/experiment/device_model.hpp: modelled time of one formed batch on one emulated device
// (a GPU preset or a whole IPU-like chip), from the timing library.
//
// GPU, padded layouts: timing::model_gpu_batch (padded to the batch's padded_length). GPU, packed
// (the crossed "GPU with packing" configuration, as FasterTransformer/ByteTransformer remove
// padding): the roofline over bert_forward_ops of the packed batch (per-sequence attention).
// Tiles: timing::model_ipu_batch on the chip (whole chip unless a mapping says otherwise),
// packed or padded as the batch says. Results are memoised by (sorted lengths, padding), so a
// timing-only sweep costs each distinct batch shape once (up to 2^18 shapes, then the memo starts over,
// so a long trace of ever-new shapes keeps memory flat).
//
//   auto gpu = device_model::load("a100-40gb", *models::shape_preset("bert-base"));
//   double s = *gpu->batch_seconds({30, 400}, backends::batch_layout::padded, 512);
#pragma once

#include <cstdint>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/timing/bert_model.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::experiment {

class device_model {
 public:
  /// A preset name or path (kind read from the file), the model shape, the dtype.
  static result<std::shared_ptr<device_model>> load(const std::string& preset, const models::model_shape& shape,
                                                    timing::dtype t = timing::dtype::fp16,
                                                    timing::ipu_mapping mapping = {});
  /// "gpu" or "tiles".
  const std::string& kind() const { return kind_; }
  const std::string& preset_name() const { return preset_; }
  /// Modelled seconds of one forward of sequences of these lengths, laid out as given
  /// (`padded_length` only for padded layouts; every sequence counts as that long).
  result<double> batch_seconds(const std::vector<int32_t>& lens, backends::batch_layout layout, int32_t padded_length);

 private:
  device_model() = default;
  std::string preset_, kind_;
  models::model_shape shape_;
  timing::dtype dtype_ = timing::dtype::fp16;
  timing::ipu_mapping mapping_;
  std::optional<timing::gpu_preset> gpu_;
  std::optional<timing::ipu_preset> ipu_;
  std::mutex mu_;
  struct key_hash {
    size_t operator()(const std::vector<int64_t>& k) const;
  };
  std::unordered_map<std::vector<int64_t>, double, key_hash> cache_;  ///< bounded: cleared at max_cached entries
  static constexpr size_t max_cached = 1 << 18;
};

}  // namespace tessera::experiment
