// Modelled batch time per device, memoised. See device_model.hpp.
#include "tessera/experiment/device_model.hpp"

#include <algorithm>

#include "tessera/timing/bert_ops.hpp"
#include "tessera/timing/gpu_roofline.hpp"

namespace tessera::experiment {

result<std::shared_ptr<device_model>> device_model::load(const std::string& preset, const models::model_shape& shape,
                                                         timing::dtype t, timing::ipu_mapping mapping) {
  auto m = std::shared_ptr<device_model>(new device_model());
  m->preset_ = preset;
  m->shape_ = shape;
  m->dtype_ = t;
  m->mapping_ = mapping;
  if (auto g = timing::load_gpu_preset(preset)) {
    m->gpu_ = *g;
    m->kind_ = "gpu";
    return m;
  }
  auto i = timing::load_ipu_preset(preset);
  if (!i) return i.error().with_context("preset " + preset + " (neither a GPU nor an IPU preset)");
  m->ipu_ = *i;
  m->kind_ = "tiles";
  return m;
}

result<double> device_model::batch_seconds(const std::vector<int32_t>& lens, backends::batch_layout layout,
                                           int32_t padded_length) {
  if (lens.empty()) return status::invalid("an empty batch has no modelled time");
  const bool padded = layout == backends::batch_layout::padded;
  std::vector<int64_t> key(lens.begin(), lens.end());
  std::sort(key.begin(), key.end());
  key.push_back(padded ? -static_cast<int64_t>(std::max(padded_length, 1)) : 0);
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  timing::bert_batch b;
  b.seq_lens.assign(key.begin(), key.end() - 1);
  if (padded) b.pad_to = std::max<int64_t>(padded_length, b.seq_lens.back());
  double seconds = 0;
  if (gpu_) {
    if (padded) {
      auto s = timing::model_gpu_batch_seconds(*gpu_, shape_, b, dtype_);
      if (!s) return s.error();
      seconds = *s;
    } else {
      // Padding-free GPU execution: the same kernels over the packed tokens.
      auto e = timing::model_gpu_forward_seconds(*gpu_, shape_, b, dtype_);
      if (!e) return e.error();
      seconds = *e;
    }
  } else {
    auto s = timing::model_ipu_batch_seconds(*ipu_, shape_, b, dtype_, mapping_);
    if (!s) return s.error();
    seconds = *s;
  }
  std::lock_guard lock(mu_);
  if (cache_.size() >= max_cached) cache_.clear();
  cache_.emplace(std::move(key), seconds);
  return seconds;
}

size_t device_model::key_hash::operator()(const std::vector<int64_t>& k) const {
  size_t h = k.size();
  for (int64_t v : k) h ^= static_cast<size_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace tessera::experiment
