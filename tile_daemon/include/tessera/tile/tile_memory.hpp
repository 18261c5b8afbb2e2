// tessera/tile/tile_memory.hpp: a tile's private memory, a hard-capped arena.
//
// Every tensor a tile holds (weights, activations, exchange buffers) is allocated here. The
// capacity is fixed when the tile starts; an allocation that would exceed it fails with a status
// that names the tile, its capacity and what fills it, largest first. The arena is one mapping
// reserved up front, so a tile cannot grow past its cap through this path; allocations are
// 64-byte aligned (AVX-512 lines) and first-fit over a free list.
//
//   tile_memory mem(/*tile=*/3, /*capacity=*/624 * 1024);
//   auto t = mem.allocate({.id = 7, .name = "w_q", .shape = {128, 64}});
//   if (!t) std::cerr << t.error().to_string();   // "tile 3 is out of memory: ..."
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
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
  uint64_t high_water_ = 0;
  std::map<uint32_t, tile_tensor> tensors_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
};

}  // namespace tessera::tile
