// The block pool (ids with reference counts) and the paged K/V storage.
#include "tessera/models/kv_cache.hpp"

#include <algorithm>

#include "tessera/models/shape.hpp"

namespace tessera::models {

status kv_layout::validate() const {
  if (block_tokens < 1) return status::invalid("kv block_tokens must be positive, got " + std::to_string(block_tokens));
  if (num_blocks < 1) return status::invalid("kv num_blocks must be positive, got " + std::to_string(num_blocks));
  if (kv_dtype != dtype::fp32 && kv_dtype != dtype::bf16)
    return status::invalid("kv_dtype " + std::string(dtype_name(kv_dtype)) + ": the KV cache holds fp32 or bf16");
  return {};
}

int32_t kv_layout::blocks_in(int64_t bytes, int block_tokens, int layers, int kv_heads, int head_dim, dtype d) {
  const int64_t per = bytes_per_block(block_tokens, layers, kv_heads, head_dim, d);
  return per > 0 && bytes > 0 ? static_cast<int32_t>(std::min<int64_t>(bytes / per, int64_t{1} << 24)) : 0;
}

block_pool::block_pool(int total_blocks) : refs_(static_cast<size_t>(total_blocks > 0 ? total_blocks : 0), 0) {
  free_.reserve(refs_.size());
  for (int i = total_blocks - 1; i >= 0; --i) free_.push_back(i);  // block 0 first
}

std::optional<int> block_pool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int id = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(id)] = 1;
  return id;
}

status block_pool::retain(int id) {
  if (id < 0 || id >= total_blocks())
    return status::invalid("retain of block " + std::to_string(id) + ": the pool has blocks 0.." +
                           std::to_string(total_blocks() - 1));
  if (refs_[static_cast<size_t>(id)] == 0) return status::invalid("retain of block " + std::to_string(id) + ", which is free");
  ++refs_[static_cast<size_t>(id)];
  return {};
}

status block_pool::release(int id) {
  if (id < 0 || id >= total_blocks())
    return status::invalid("release of block " + std::to_string(id) + ": the pool has blocks 0.." +
                           std::to_string(total_blocks() - 1));
  int& r = refs_[static_cast<size_t>(id)];
  if (r == 0) return status::invalid("release of block " + std::to_string(id) + ", which is already free");
  if (--r == 0) free_.push_back(id);
  return {};
}

int block_pool::ref_count(int id) const {
  return id < 0 || id >= total_blocks() ? 0 : refs_[static_cast<size_t>(id)];
}

paged_kv_cache::paged_kv_cache(int num_layers, int num_kv_heads, int head_dim, kv_layout layout)
    : layers_(num_layers), kv_heads_(num_kv_heads), head_dim_(head_dim), layout_(layout) {
  const size_t n = static_cast<size_t>(int64_t{num_layers} * layout.num_blocks * num_kv_heads * layout.block_tokens *
                                       head_dim);
  if (layout.kv_dtype == dtype::bf16) {
    k16_.assign(n, bfloat16{});
    v16_.assign(n, bfloat16{});
  } else {
    k_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
  }
}

result<paged_kv_cache> paged_kv_cache::make(const model_shape& shape, kv_layout layout) {
  TESSERA_RETURN_IF_ERROR(shape.validate());
  TESSERA_RETURN_IF_ERROR(layout.validate());
  return paged_kv_cache(shape.num_layers, shape.num_kv_heads, shape.head_dim(), layout);
}

}  // namespace tessera::models
