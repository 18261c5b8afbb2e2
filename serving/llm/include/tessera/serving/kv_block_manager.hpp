// tessera/serving/kv_block_manager.hpp: the KV blocks of the sequences a scheduler runs: a block
// table per sequence on models' block_pool (reference-counted block ids), and prefix caching:
// every full block whose K/V are computed is remembered by the hash of the whole token prefix it
// ends (XXH3 chained block by block, the tokens compared too), so a later sequence starting with
// the same tokens (a shared system prompt) takes those blocks instead of computing them again.
//
// A cached block holds one reference of its own; when no sequence uses it any more it stays
// cached and "evictable" (least recently used first) until the pool runs dry and it is taken for
// a new block. free_blocks() counts free and evictable blocks: what allocations can get.
// Not thread-safe: one scheduler owns it.
//
//   kv_block_manager m(/*num_blocks=*/64, /*block_tokens=*/16, /*prefix_caching=*/true);
//   int32_t cached = m.match_prefix(7, prompt);    // tokens already in the cache (whole blocks)
//   if (!m.ensure(7, cached + 16)) ...             // pool dry: preempt someone, try again
//   m.commit_full_blocks(7, tokens, computed);     // register what is now computed
//   m.free(7);                                     // finished, cancelled or preempted
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/common/status.hpp"

#include "tessera/models/kv_cache.hpp"

namespace tessera::serving {

using models::block_pool;

class kv_block_manager {
 public:
  kv_block_manager(int32_t num_blocks, int32_t block_tokens, bool prefix_caching);

  int32_t block_tokens() const { return block_tokens_; }
  int32_t total_blocks() const { return pool_.total_blocks(); }
  /// Blocks an allocation can get now: free, plus cached blocks no sequence uses.
  int32_t free_blocks() const;
  /// Blocks some sequence uses.
  int32_t used_blocks() const { return total_blocks() - free_blocks(); }
  /// Cached blocks (used or evictable).
  int32_t cached_blocks() const { return static_cast<int32_t>(cache_.size()); }
  bool prefix_caching() const { return prefix_caching_; }

  /// Blocks for `tokens` positions.
  int32_t blocks_for(int64_t tokens) const {
    return static_cast<int32_t>((tokens + block_tokens_ - 1) / block_tokens_);
  }

  /// What match_prefix would take for `tokens` without taking it: whole cached blocks, and how
  /// many of them are evictable now (they stop counting as free once taken).
  struct prefix_peek {
    int32_t blocks = 0;
    int32_t evictable = 0;
  };
  prefix_peek peek_prefix(const std::vector<int32_t>& tokens) const;
  /// For a sequence without blocks: takes the cached blocks of the longest cached prefix of
  /// `tokens` (whole blocks, leaving at least the last token to compute) and returns how many
  /// tokens they hold.
  int32_t match_prefix(uint64_t seq, const std::vector<int32_t>& tokens);
  /// Grows the sequence's table to cover `positions` positions. False, nothing taken, when the
  /// pool cannot give enough blocks.
  bool ensure(uint64_t seq, int32_t positions);
  /// Registers the sequence's full blocks whose positions are all below `computed` in the prefix
  /// cache (tokens: the sequence's tokens, at least `computed` of them).
  void commit_full_blocks(uint64_t seq, const std::vector<int32_t>& tokens, int32_t computed);
  /// For a sequence without blocks: takes the first `blocks` blocks of `parent`'s table (one more
  /// reference each; a forked sequence shares its parent's full prompt blocks, never writes them).
  void share(uint64_t seq, uint64_t parent, int32_t blocks);
  /// Drops the sequence's blocks (cached ones stay cached).
  void free(uint64_t seq);
  /// The backend lost the cached blocks' K/V (a tile came back empty): forgets the prefix cache
  /// and frees its unused blocks. Call it with no sequence holding blocks (llm_scheduler::lose_kv).
  void forget_cached();
  /// The sequence's block table (empty for an unknown sequence).
  const std::vector<int32_t>& table(uint64_t seq) const;

  /// Cached blocks handed to sequences, and blocks looked up, since the start.
  int64_t prefix_hit_blocks() const { return hit_blocks_; }
  int64_t prefix_query_blocks() const { return query_blocks_; }
  int64_t evictions() const { return evictions_; }

  /// Reference counts agree with the tables and the cache, no block is both free and used:
  /// an empty string, else what is wrong (tests).
  std::string check() const;

 private:
  struct seq_blocks {
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;  // chained hash of each full, committed block
  };
  struct cache_entry {
    int32_t block = 0;
    std::vector<int32_t> tokens;  // the block's tokens (hash collisions are checked)
    uint64_t parent = 0;
  };
  uint64_t block_hash(uint64_t parent, const int32_t* tokens) const;
  /// Index of the cache entry for (parent, tokens), or none.
  const cache_entry* lookup(uint64_t h, uint64_t parent, const int32_t* tokens) const;
  /// (hash, block) of the cached whole blocks `tokens` starts with (at least one token left over).
  std::vector<std::pair<uint64_t, int32_t>> cached_prefix(const std::vector<int32_t>& tokens) const;
  std::optional<int32_t> allocate();
  void take_cached(int32_t block);

  int32_t block_tokens_;
  bool prefix_caching_;
  block_pool pool_;
  std::unordered_map<uint64_t, seq_blocks> seqs_;
  std::unordered_map<uint64_t, cache_entry> cache_;     // prefix hash -> block
  std::vector<std::optional<uint64_t>> block_key_;      // block -> its prefix hash, if cached
  std::vector<int32_t> seq_refs_;                       // block -> sequences using it
  std::list<int32_t> evictable_;                        // cached, unused: LRU first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  int64_t hit_blocks_ = 0, query_blocks_ = 0, evictions_ = 0;
};

}  // namespace tessera::serving
