#include "tessera/tile/tile_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "tessera/common/check.hpp"

namespace tessera::tile {

tile_memory::tile_memory(uint32_t tile_id, uint64_t capacity) : tile_id_(tile_id), capacity_(capacity) {
  if (capacity_ > 0) {
    // Reserved, not committed: pages are backed when first touched.
    void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TESSERA_CHECK(p != MAP_FAILED) << "cannot reserve " << capacity_ << " bytes for tile " << tile_id_;
    base_ = static_cast<std::byte*>(p);
    free_[0] = capacity_;
  }
}

tile_memory::~tile_memory() {
  if (base_) munmap(base_, capacity_);
}

result<tile_tensor*> tile_memory::allocate(const exchange::tensor_desc& desc, bool zero) {
  if (tensors_.count(desc.id))
    return status::invalid("tile " + std::to_string(tile_id_) + " already holds tensor id " + std::to_string(desc.id) +
                           " ('" + tensors_.at(desc.id).desc.name + "')");
  uint64_t want = desc.bytes();
  uint64_t rounded = std::max<uint64_t>(alignment, (want + alignment - 1) / alignment * alignment);
  // Held buffers give way: back into the arena, largest first, until this one fits the cap.
  while (held_ > 0 && used_ + held_ + rounded > capacity_) {
    tile_tensor* largest = nullptr;
    for (auto& [id, t] : tensors_)
      if (t.held && (!largest || t.desc.bytes() > largest->desc.bytes())) largest = &t;
    unhold(*largest);
  }
  auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& kv) { return kv.second >= rounded; });
  if (it == free_.end()) {
    return status::out_of_memory("tile " + std::to_string(tile_id_) + " is out of memory: tensor '" + desc.name +
                                 "' needs " + format_bytes(rounded) + ", " + format_bytes(capacity_ - used_) +
                                 " free of " + format_bytes(capacity_) + " capacity; " + fill_report() +
                                 ". Give tiles more memory (--tile-memory) or use more tiles.");
  }
  uint64_t off = it->first, len = it->second;
  free_.erase(it);
  if (len > rounded) free_[off + rounded] = len - rounded;
  tile_tensor t{desc, base_ + off, off, rounded};
  if (zero) std::memset(t.data, 0, want);
  used_ += rounded;
  high_water_ = std::max(high_water_, used_);
  auto [pos, _] = tensors_.emplace(desc.id, std::move(t));
  return &pos->second;
}

status tile_memory::release(uint32_t id) {
  auto it = tensors_.find(id);
  if (it == tensors_.end())
    return status::not_found("tile " + std::to_string(tile_id_) + " holds no tensor id " + std::to_string(id));
  uint64_t off = it->second.offset, len = it->second.bytes;
  used_ -= len;
  if (it->second.held) held_ -= it->second.desc.bytes();
  tensors_.erase(it);
  // Insert and coalesce with neighbours.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return ok_status();
    }
  }
  free_[off] = len;
  return ok_status();
}

tile_tensor* tile_memory::find(uint32_t id) {
  auto it = tensors_.find(id);
  return it == tensors_.end() ? nullptr : &it->second;
}

status tile_memory::hold(uint32_t id, std::byte* data, std::shared_ptr<void> owner) {
  tile_tensor* t = find(id);
  if (!t) return status::not_found("tile " + std::to_string(tile_id_) + " holds no tensor id " + std::to_string(id));
  if (reinterpret_cast<uintptr_t>(data) % exchange::dtype_size(t->desc.type) != 0)
    return status::invalid("a held buffer for tensor '" + t->desc.name + "' is not aligned to its elements");
  const uint64_t bytes = t->desc.bytes();
  const uint64_t before = t->held ? bytes : 0;  // a buffer it already holds is replaced
  if (used_ + held_ - before + bytes > capacity_)
    return status::out_of_memory("tile " + std::to_string(tile_id_) + " cannot hold " + format_bytes(bytes) +
                                 " for tensor '" + t->desc.name + "' beside its arena: " + fill_report());
  held_ = held_ - before + bytes;
  t->data = data;
  t->held = std::move(owner);
  return ok_status();
}

void tile_memory::unhold(tile_tensor& t) {
  if (!t.held) return;
  std::byte* arena = base_ + t.offset;
  std::memcpy(arena, t.data, t.desc.bytes());
  t.data = arena;
  t.held.reset();
  held_ -= t.desc.bytes();
}

std::string tile_memory::fill_report(size_t max_items) const {
  std::vector<const tile_tensor*> v;
  for (const auto& [id, t] : tensors_) v.push_back(&t);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  std::ostringstream os;
  os << "tile " << tile_id_ << " holds " << format_bytes(used_) << " in " << v.size() << " tensors";
  if (held_ > 0) os << " and " << format_bytes(held_) << " received in place";
  if (!v.empty()) os << " (";
  for (size_t i = 0; i < v.size() && i < max_items; ++i) {
    if (i) os << ", ";
    os << v[i]->desc.name << " " << format_bytes(v[i]->bytes);
  }
  if (v.size() > max_items) os << ", ...";
  if (!v.empty()) os << ")";
  return os.str();
}

}  // namespace tessera::tile
