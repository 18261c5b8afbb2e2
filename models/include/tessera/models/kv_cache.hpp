// tessera/models/kv_cache.hpp: the paged key/value cache of decoder attention.
//
// Positions of a sequence live in fixed-size blocks of block_tokens positions; a sequence's block
// table lists its blocks in position order (block_table[i] holds positions
// [i*block_tokens, (i+1)*block_tokens)). block_pool hands out block ids with reference counts (the
// serving scheduler shares prefix blocks through retain/release; nobody writes a second
// allocator); paged_kv_cache is the K and V storage of those blocks for the layers and kv heads
// that whoever owns it runs (the whole model in one process, a tile's layers and heads on tiles).
//
//   kv_layout layout{16, 256};                         // 256 blocks of 16 positions
//   block_pool pool(layout.num_blocks);
//   paged_kv_cache cache(shape.num_layers, shape.num_kv_heads, shape.head_dim(), layout);
//   auto b = pool.allocate();                          // nullopt when every block is in use
//   float* k = cache.key(layer, *b, kv_head);          // [block_tokens, head_dim]
//
// The K/V element type is the layout's kv_dtype: fp32 (the reference) or bf16 (key16/value16;
// attention reads bf16 rows into fp32 and accumulates, softmaxes and writes in fp32). A bf16 block
// of the same block_tokens takes half the bytes, so the same memory holds twice the blocks and
// positions (bytes_per_block, blocks_in).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/bf16.hpp"
#include "tessera/models/huge_pages.hpp"

namespace tessera::models {

struct model_shape;

/// How the cache is cut: positions per block, blocks in the pool, and the K/V element type.
struct kv_layout {
  int block_tokens = 16;
  int num_blocks = 0;
  dtype kv_dtype = dtype::fp32;

  /// Bytes of one block's K and V for `layers` layers of `kv_heads` heads of head_dim, at
  /// `d`'s element size (4 bytes fp32, 2 bf16).
  static int64_t bytes_per_block(int block_tokens, int layers, int kv_heads, int head_dim, dtype d = dtype::fp32) {
    return int64_t{2} * block_tokens * layers * kv_heads * head_dim * dtype_bytes(d);
  }
  /// Whole blocks of `block_tokens` positions that `bytes` hold for `layers` x `kv_heads` x head_dim
  /// in `d` (capped at 2^24 blocks; 0 when not one fits).
  static int32_t blocks_in(int64_t bytes, int block_tokens, int layers, int kv_heads, int head_dim, dtype d);
  /// Blocks needed for `tokens` positions.
  int blocks_for(int64_t tokens) const {
    return static_cast<int>((tokens + block_tokens - 1) / block_tokens);
  }
  /// block_tokens >= 1 and num_blocks >= 1.
  status validate() const;
};

/// Free list of block ids 0..total-1 with reference counts. Not thread-safe (one scheduler owns it).
class block_pool {
 public:
  explicit block_pool(int total_blocks);

  /// A free block with reference count 1, or nullopt when every block is in use.
  std::optional<int> allocate();
  /// Adds a reference to an allocated block. Error for an id out of range or a free block.
  status retain(int id);
  /// Drops a reference; the block is free again when it reaches 0. Error for an id out of range
  /// or a free block (a double release).
  status release(int id);
  /// Reference count of a block (0 = free); 0 for an id out of range.
  int ref_count(int id) const;
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int total_blocks() const { return static_cast<int>(refs_.size()); }

 private:
  std::vector<int> refs_;
  std::vector<int> free_;  // a stack: the most recently freed block is reused first
};

/// K and V storage, [layer][block][kv_head][block_tokens][head_dim] each, zero-initialised.
class paged_kv_cache {
 public:
  /// Storage for `num_layers` layers of `num_kv_heads` heads. Throws nothing; check bytes() first
  /// when memory is a concern (make() refuses what does not fit).
  paged_kv_cache(int num_layers, int num_kv_heads, int head_dim, kv_layout layout);
  /// Same, the whole model of a shape; error for an invalid layout.
  static result<paged_kv_cache> make(const model_shape& shape, kv_layout layout);

  const kv_layout& layout() const { return layout_; }
  int num_layers() const { return layers_; }
  int num_kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  dtype kv_dtype() const { return layout_.kv_dtype; }
  int64_t bytes() const {
    return static_cast<int64_t>(k_.size() + v_.size()) * 4 + static_cast<int64_t>(k16_.size() + v16_.size()) * 2;
  }
  /// Positions the cache holds: num_blocks x block_tokens.
  int64_t positions() const { return int64_t{layout_.num_blocks} * layout_.block_tokens; }

  /// [block_tokens, head_dim] rows of one block and head of an fp32 cache (nullptr for a bf16 one).
  float* key(int layer, int block, int kv_head) { return k_.empty() ? nullptr : k_.data() + offset(layer, block, kv_head); }
  float* value(int layer, int block, int kv_head) { return v_.empty() ? nullptr : v_.data() + offset(layer, block, kv_head); }
  const float* key(int layer, int block, int kv_head) const {
    return k_.empty() ? nullptr : k_.data() + offset(layer, block, kv_head);
  }
  const float* value(int layer, int block, int kv_head) const {
    return v_.empty() ? nullptr : v_.data() + offset(layer, block, kv_head);
  }
  /// The same rows of a bf16 cache (nullptr for an fp32 one).
  bfloat16* key16(int layer, int block, int kv_head) {
    return k16_.empty() ? nullptr : k16_.data() + offset(layer, block, kv_head);
  }
  bfloat16* value16(int layer, int block, int kv_head) {
    return v16_.empty() ? nullptr : v16_.data() + offset(layer, block, kv_head);
  }
  const bfloat16* key16(int layer, int block, int kv_head) const {
    return k16_.empty() ? nullptr : k16_.data() + offset(layer, block, kv_head);
  }
  const bfloat16* value16(int layer, int block, int kv_head) const {
    return v16_.empty() ? nullptr : v16_.data() + offset(layer, block, kv_head);
  }

 private:
  int64_t offset(int layer, int block, int kv_head) const {
    return ((int64_t{layer} * layout_.num_blocks + block) * kv_heads_ + kv_head) * layout_.block_tokens * head_dim_;
  }
  int layers_, kv_heads_, head_dim_;
  kv_layout layout_;
  // Huge pages: decode streams the whole cache a step (tessera/models/huge_pages.hpp).
  std::vector<float, huge_page_allocator<float>> k_, v_;             // fp32 cache
  std::vector<bfloat16, huge_page_allocator<bfloat16>> k16_, v16_;  // bf16 cache
};

}  // namespace tessera::models
