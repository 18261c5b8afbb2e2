// Block tables and prefix caching on models' block_pool. See kv_block_manager.hpp.
#include "tessera/serving/kv_block_manager.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "tessera/common/check.hpp"

namespace tessera::serving {

namespace {
const std::vector<int32_t> no_table;
}

kv_block_manager::kv_block_manager(int32_t num_blocks, int32_t block_tokens, bool prefix_caching)
    : block_tokens_(block_tokens), prefix_caching_(prefix_caching), pool_(num_blocks),
      block_key_(static_cast<size_t>(num_blocks)), seq_refs_(static_cast<size_t>(num_blocks), 0),
      lru_pos_(static_cast<size_t>(num_blocks)), in_lru_(static_cast<size_t>(num_blocks), false) {
  TESSERA_CHECK(num_blocks >= 1 && block_tokens >= 1) << "kv_block_manager needs blocks";
}

int32_t kv_block_manager::free_blocks() const {
  return pool_.free_blocks() + static_cast<int32_t>(evictable_.size());
}

uint64_t kv_block_manager::block_hash(uint64_t parent, const int32_t* tokens) const {
  return XXH3_64bits_withSeed(tokens, sizeof(int32_t) * static_cast<size_t>(block_tokens_), parent);
}

const kv_block_manager::cache_entry* kv_block_manager::lookup(uint64_t h, uint64_t parent,
                                                              const int32_t* tokens) const {
  auto it = cache_.find(h);
  if (it == cache_.end() || it->second.parent != parent ||
      std::memcmp(it->second.tokens.data(), tokens, sizeof(int32_t) * static_cast<size_t>(block_tokens_)) != 0)
    return nullptr;
  return &it->second;
}

std::vector<std::pair<uint64_t, int32_t>> kv_block_manager::cached_prefix(const std::vector<int32_t>& tokens) const {
  std::vector<std::pair<uint64_t, int32_t>> out;
  if (!prefix_caching_ || tokens.empty()) return out;
  const size_t usable = (tokens.size() - 1) / static_cast<size_t>(block_tokens_);
  uint64_t parent = 0;
  for (size_t i = 0; i < usable; ++i) {
    const int32_t* t = tokens.data() + i * static_cast<size_t>(block_tokens_);
    const uint64_t h = block_hash(parent, t);
    const cache_entry* e = lookup(h, parent, t);
    if (!e) break;
    out.emplace_back(h, e->block);
    parent = h;
  }
  return out;
}

kv_block_manager::prefix_peek kv_block_manager::peek_prefix(const std::vector<int32_t>& tokens) const {
  prefix_peek p;
  for (const auto& [h, block] : cached_prefix(tokens)) {
    ++p.blocks;
    if (in_lru_[static_cast<size_t>(block)]) ++p.evictable;
  }
  return p;
}

void kv_block_manager::take_cached(int32_t block) {
  auto b = static_cast<size_t>(block);
  if (in_lru_[b]) {
    evictable_.erase(lru_pos_[b]);
    in_lru_[b] = false;
  }
  auto st = pool_.retain(block);
  TESSERA_CHECK(st.ok()) << "retain of cached block " << block << ": " << st.message();
  ++seq_refs_[b];
}

int32_t kv_block_manager::match_prefix(uint64_t seq, const std::vector<int32_t>& tokens) {
  auto& s = seqs_[seq];
  TESSERA_CHECK(s.table.empty()) << "match_prefix on a sequence holding blocks";
  if (prefix_caching_ && !tokens.empty())
    query_blocks_ += static_cast<int64_t>((tokens.size() - 1) / static_cast<size_t>(block_tokens_));
  for (const auto& [h, block] : cached_prefix(tokens)) {
    take_cached(block);
    s.table.push_back(block);
    s.hashes.push_back(h);
    ++hit_blocks_;
  }
  return static_cast<int32_t>(s.table.size()) * block_tokens_;
}

std::optional<int32_t> kv_block_manager::allocate() {
  if (auto b = pool_.allocate()) return *b;
  if (evictable_.empty()) return std::nullopt;
  // The least recently used cached block no sequence uses: forget it, reuse it.
  int32_t victim = evictable_.front();
  evictable_.pop_front();
  auto v = static_cast<size_t>(victim);
  in_lru_[v] = false;
  cache_.erase(*block_key_[v]);
  block_key_[v].reset();
  ++evictions_;
  auto st = pool_.release(victim);  // the cache's own reference: now free
  TESSERA_CHECK(st.ok()) << st.message();
  auto b = pool_.allocate();
  TESSERA_CHECK(b.has_value()) << "an evicted block did not come back";
  return *b;
}

bool kv_block_manager::ensure(uint64_t seq, int32_t positions) {
  auto& s = seqs_[seq];
  const int32_t want = blocks_for(positions);
  const int32_t more = want - static_cast<int32_t>(s.table.size());
  if (more <= 0) return true;
  if (free_blocks() < more) return false;
  for (int32_t i = 0; i < more; ++i) {
    auto b = allocate();
    TESSERA_CHECK(b.has_value()) << "free_blocks() promised a block";
    ++seq_refs_[static_cast<size_t>(*b)];
    s.table.push_back(*b);
  }
  return true;
}

void kv_block_manager::commit_full_blocks(uint64_t seq, const std::vector<int32_t>& tokens,
                                          int32_t computed) {
  if (!prefix_caching_) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  auto& s = it->second;
  const size_t full = std::min(static_cast<size_t>(computed) / static_cast<size_t>(block_tokens_),
                               s.table.size());
  while (s.hashes.size() < full) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    const int32_t* t = tokens.data() + i * static_cast<size_t>(block_tokens_);
    const uint64_t h = block_hash(parent, t);
    s.hashes.push_back(h);
    const int32_t block = s.table[i];
    auto b = static_cast<size_t>(block);
    if (block_key_[b] || cache_.count(h)) continue;  // cached already (this block, or a twin)
    cache_.emplace(h, cache_entry{block, std::vector<int32_t>(t, t + block_tokens_), parent});
    block_key_[b] = h;
    auto st = pool_.retain(block);  // the cache's own reference
    TESSERA_CHECK(st.ok()) << st.message();
  }
}

void kv_block_manager::share(uint64_t seq, uint64_t parent, int32_t blocks) {
  auto& s = seqs_[seq];
  TESSERA_CHECK(s.table.empty()) << "share() on a sequence holding blocks";
  const auto& p = seqs_.at(parent);
  const size_t n = std::min(static_cast<size_t>(std::max(blocks, 0)), p.table.size());
  for (size_t i = 0; i < n; ++i) {
    const int32_t block = p.table[i];
    auto st = pool_.retain(block);
    TESSERA_CHECK(st.ok()) << "retain of shared block " << block << ": " << st.message();
    ++seq_refs_[static_cast<size_t>(block)];
    s.table.push_back(block);
  }
  s.hashes.assign(p.hashes.begin(), p.hashes.begin() + static_cast<std::ptrdiff_t>(std::min(n, p.hashes.size())));
}

void kv_block_manager::free(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Last block first: the evictable list then drops a prefix's tail before its head.
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b) {
    auto i = static_cast<size_t>(*b);
    --seq_refs_[i];
    auto st = pool_.release(*b);
    TESSERA_CHECK(st.ok()) << "release of block " << *b << ": " << st.message();
    if (seq_refs_[i] == 0 && block_key_[i]) {
      lru_pos_[i] = evictable_.insert(evictable_.end(), *b);
      in_lru_[i] = true;
    }
  }
  seqs_.erase(it);
}

void kv_block_manager::forget_cached() {
  for (size_t i = 0; i < block_key_.size(); ++i) {
    if (!block_key_[i]) continue;
    if (in_lru_[i]) {
      evictable_.erase(lru_pos_[i]);
      in_lru_[i] = false;
    }
    cache_.erase(*block_key_[i]);
    block_key_[i].reset();
    auto st = pool_.release(static_cast<int>(i));  // the cache's own reference
    TESSERA_CHECK(st.ok()) << "release of cached block " << i << ": " << st.message();
  }
  for (auto& [id, sb] : seqs_) sb.hashes.clear();
}

const std::vector<int32_t>& kv_block_manager::table(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? no_table : it->second.table;
}

std::string kv_block_manager::check() const {
  std::vector<int32_t> refs(static_cast<size_t>(total_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    std::vector<int32_t> sorted = s.table;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return "sequence " + std::to_string(id) + " holds a block twice";
    for (int32_t b : s.table) ++refs[static_cast<size_t>(b)];
  }
  int32_t lru = 0;
  for (size_t b = 0; b < refs.size(); ++b) {
    if (refs[b] != seq_refs_[b]) return "block " + std::to_string(b) + ": sequence count off";
    const int want = refs[b] + (block_key_[b] ? 1 : 0);
    if (pool_.ref_count(static_cast<int>(b)) != want)
      return "block " + std::to_string(b) + ": pool count " +
             std::to_string(pool_.ref_count(static_cast<int>(b))) + ", expected " + std::to_string(want);
    if (in_lru_[b] != (block_key_[b] && refs[b] == 0)) return "block " + std::to_string(b) + ": LRU state off";
    lru += in_lru_[b];
  }
  if (lru != static_cast<int32_t>(evictable_.size())) return "LRU list length off";
  int32_t free_count = 0;
  for (size_t b = 0; b < refs.size(); ++b) free_count += pool_.ref_count(static_cast<int>(b)) == 0;
  if (free_count != pool_.free_blocks()) return "pool free count off";
  return {};
}

}  // namespace tessera::serving
