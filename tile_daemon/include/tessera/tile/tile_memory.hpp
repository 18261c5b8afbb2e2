// tessera/tile/tile_memory.hpp: a tile's private memory, a hard-capped arena.
//
// Every tensor a tile holds (weights, activations, exchange buffers) is allocated here. The
// capacity is fixed when the tile starts; an allocation that would exceed it fails with a status
// that names the tile, its capacity and what fills it, largest first. The arena is one mapping
// reserved up front, so a tile cannot grow past its cap through this path; allocations are
// 64-byte aligned (AVX-512 lines) and first-fit over a free list.
//
// A tensor's bytes may instead live in a buffer the tile holds (hold(): a slice received in
// place, the ZeroMQ message kept as its storage). Everything reads and writes a tensor through
// tile_tensor::data, so nothing else changes. Held bytes count against the cap on top of the
// arena (the tensor keeps its arena bytes to go back to): hold() refuses what would pass the cap,
// and allocate() copies held tensors back into the arena (largest first) before it would.
//
//   tile_memory mem(/*tile=*/3, /*capacity=*/624 * 1024);
//   auto t = mem.allocate({.id = 7, .name = "w_q", .shape = {128, 64}});
//   if (!t) std::cerr << t.error().to_string();   // "tile 3 is out of memory: ..."
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/common/units.hpp"
#include "tessera/exchange/protocol.hpp"

namespace tessera::tile {

/// A tensor living in tile memory.
struct tile_tensor {
  exchange::tensor_desc desc;
  std::byte* data = nullptr;
  uint64_t offset = 0;  ///< within the arena
  uint64_t bytes = 0;   ///< rounded up to the alignment
  /// Owner of the bytes at `data` when they are held outside the arena (tile_memory::hold).
  std::shared_ptr<void> held;
  float* f32() const { return reinterpret_cast<float*>(data); }
  int32_t* i32() const { return reinterpret_cast<int32_t*>(data); }
  uint64_t elements() const { return desc.elements(); }
};

class tile_memory {
 public:
  static constexpr uint64_t alignment = exchange::tensor_alignment;

  tile_memory(uint32_t tile_id, uint64_t capacity);
  ~tile_memory();
  tile_memory(const tile_memory&) = delete;
  tile_memory& operator=(const tile_memory&) = delete;

  /// Allocates (zero-filled when `zero`). Fails with out_of_memory (naming what fills the tile)
  /// or invalid_argument (the id is taken).
  result<tile_tensor*> allocate(const exchange::tensor_desc& desc, bool zero = true);
  /// Frees a tensor; not_found if there is none with that id.
  status release(uint32_t id);
  /// The tensor with `id`, or nullptr.
  tile_tensor* find(uint32_t id);

  /// Makes the desc.bytes() bytes at `data`, kept alive by `owner`, tensor `id`'s storage
  /// instead of its arena bytes (whose content is then stale), replacing a buffer it already
  /// holds. `data` must be aligned for the tensor's element type. Fails, changing nothing, with
  /// out_of_memory when arena use plus held bytes would pass the capacity (the caller copies
  /// instead), not_found or invalid_argument (misaligned) otherwise.
  status hold(uint32_t id, std::byte* data, std::shared_ptr<void> owner);
  /// Copies a held tensor's bytes back into its arena bytes and drops the buffer; nothing to
  /// do for a tensor in the arena.
  void unhold(tile_tensor& t);
  /// Bytes of tensors held outside the arena (counted against the capacity).
  uint64_t held_bytes() const { return held_; }

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t high_water() const { return high_water_; }
  uint32_t tile_id() const { return tile_id_; }
  size_t tensor_count() const { return tensors_.size(); }

  /// "tile 3: 640 KiB capacity, 600 KiB used: w_ffn1 (256 KiB), ..." (largest first).
  std::string fill_report(size_t max_items = 12) const;

 private:
  uint32_t tile_id_;
  uint64_t capacity_;
  std::byte* base_ = nullptr;
  uint64_t used_ = 0;
  uint64_t held_ = 0;
  uint64_t high_water_ = 0;
  std::map<uint32_t, tile_tensor> tensors_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
};

}  // namespace tessera::tile
