// packed_batch helpers, batch validation, the seed workload and synthetic batches.
#include <algorithm>

#include "tessera/models/batch.hpp"

namespace tessera::models {

int packed_batch::max_seq_len() const {
  int m = 0;
  for (int i = 0; i < num_seqs(); ++i) m = std::max(m, seq_len(i));
  return m;
}

void packed_batch::append(const encoding& e) { append(e.token_ids, e.token_type_ids); }

void packed_batch::append(std::span<const int32_t> ids, std::span<const int32_t> type_ids) {
  if (seq_offsets.empty()) seq_offsets.push_back(0);
  token_ids.insert(token_ids.end(), ids.begin(), ids.end());
  if (type_ids.empty()) token_type_ids.resize(token_ids.size(), 0);
  else token_type_ids.insert(token_type_ids.end(), type_ids.begin(), type_ids.end());
  seq_offsets.push_back(static_cast<int32_t>(token_ids.size()));
}

packed_batch packed_batch::slice(int first, int count) const {
  packed_batch b;
  for (int s = first; s < first + count; ++s) {
    const auto a = static_cast<size_t>(seq_offsets[s]), n = static_cast<size_t>(seq_len(s));
    b.append(std::span(token_ids).subspan(a, n), std::span(token_type_ids).subspan(a, n));
  }
  return b;
}

status validate_batch(const bert_config& cfg, const packed_batch& b) {
  if (b.seq_offsets.empty() || b.seq_offsets.front() != 0)
    return status::invalid("seq_offsets must start with 0");
  if (b.token_type_ids.size() != b.token_ids.size())
    return status::invalid("token_type_ids has " + std::to_string(b.token_type_ids.size()) + " entries, token_ids " +
                           std::to_string(b.token_ids.size()));
  if (b.seq_offsets.back() != b.num_tokens())
    return status::invalid("seq_offsets ends at " + std::to_string(b.seq_offsets.back()) + " but there are " +
                           std::to_string(b.num_tokens()) + " tokens");
  for (int s = 0; s < b.num_seqs(); ++s) {
    const int len = b.seq_len(s);
    if (len < 1 || len > cfg.max_sequence_length())
      return status::invalid("sequence " + std::to_string(s) + " has " + std::to_string(len) +
                             " tokens; it must have 1.." + std::to_string(cfg.max_sequence_length()));
  }
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    const auto i = static_cast<size_t>(t);
    if (b.token_ids[i] < 0 || b.token_ids[i] >= cfg.vocab_size)
      return status::invalid("token " + std::to_string(t) + " has id " + std::to_string(b.token_ids[i]) +
                             " outside the vocab [0, " + std::to_string(cfg.vocab_size) + ")");
    if (b.token_type_ids[i] < 0 || b.token_type_ids[i] >= cfg.type_vocab_size)
      return status::invalid("token " + std::to_string(t) + " has type id " + std::to_string(b.token_type_ids[i]) +
                             " outside [0, " + std::to_string(cfg.type_vocab_size) + ")");
  }
  return {};
}

std::vector<int> seed_workload(int n, double long_share, uint64_t seed) {
  splitmix64 rng(seed);
  const length_mix mix{.long_share = long_share};
  std::vector<int> lens;
  lens.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) lens.push_back(mix.draw(rng));
  return lens;
}

packed_batch synthetic_batch(const std::vector<int>& lengths, int vocab_size, uint64_t seed) {
  splitmix64 rng(seed);
  packed_batch b;
  std::vector<int32_t> ids;
  const int32_t cls = std::min(101, vocab_size - 1), lo = vocab_size > 1000 ? 1000 : 1;
  for (int L : lengths) {
    ids.assign(static_cast<size_t>(L), 0);
    for (int i = 0; i < L; ++i)
      ids[static_cast<size_t>(i)] = i == 0 ? cls : static_cast<int32_t>(rng.uniform(lo, vocab_size - 1));
    b.append(ids);
  }
  return b;
}

}  // namespace tessera::models
