// Specials and truncation over any word-piece tokenizer. See tokenizer.hpp.
#include "tessera/serving/tokenizer.hpp"

#include <algorithm>
#include <utility>

namespace tessera::serving {

namespace {

/// Keeps `keep` pieces of `p`: the first ones when cutting the right end, the last ones else.
void cut(std::vector<text_piece>& p, size_t keep, truncation_side side) {
  if (p.size() <= keep) return;
  if (side == truncation_side::left) p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(keep));
  else p.resize(keep);
}

/// How many pieces of a pair of lengths (n1, n2) stay within `budget`, as the fast tokenizer's
/// longest-first strategy decides: the shorter input is kept whole when the longer can absorb the
/// cut, else both get half the budget (the second one the odd token).
std::pair<size_t, size_t> longest_first(size_t n1, size_t n2, size_t budget) {
  if (n1 + n2 <= budget) return {n1, n2};
  const bool swapped = n1 > n2;
  if (swapped) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swapped) std::swap(n1, n2);
  return {n1, n2};
}

void append(backends::sequence_input& s, const std::vector<text_piece>& p, int32_t type) {
  for (const auto& x : p) {
    s.token_ids.push_back(x.id);
    s.token_type_ids.push_back(type);
  }
}

}  // namespace

result<backends::sequence_input> tokenizer::encode(std::string_view text, int32_t max_length,
                                               truncation_side side) const {
  auto p = pieces(text);
  if (!p) return p.error();
  if (max_length > 0) cut(*p, static_cast<size_t>(std::max(0, max_length - 2)), side);
  backends::sequence_input s;
  s.token_ids.reserve(p->size() + 2);
  s.token_type_ids.reserve(p->size() + 2);
  s.token_ids.push_back(cls_id());
  s.token_type_ids.push_back(0);
  append(s, *p, 0);
  s.token_ids.push_back(sep_id());
  s.token_type_ids.push_back(0);
  return s;
}

result<backends::sequence_input> tokenizer::encode_pair(std::string_view a, std::string_view b,
                                                    int32_t max_length,
                                                    truncation_side side) const {
  auto pa = pieces(a);
  if (!pa) return pa.error().with_context("first text");
  auto pb = pieces(b);
  if (!pb) return pb.error().with_context("second text");
  const bool roberta = roberta_pairs();
  if (max_length > 0) {
    auto [n1, n2] = longest_first(pa->size(), pb->size(), static_cast<size_t>(std::max(0, max_length - (roberta ? 4 : 3))));
    cut(*pa, n1, side);
    cut(*pb, n2, side);
  }
  backends::sequence_input s;
  if (roberta) {
    s.token_ids.push_back(cls_id());
    append(s, *pa, 0);
    s.token_ids.insert(s.token_ids.end(), {sep_id(), sep_id()});
    append(s, *pb, 0);
    s.token_ids.push_back(sep_id());
    s.token_type_ids.assign(s.token_ids.size(), 0);
    return s;
  }
  s.token_ids.push_back(cls_id());
  s.token_type_ids.push_back(0);
  append(s, *pa, 0);
  s.token_ids.push_back(sep_id());
  s.token_type_ids.push_back(0);
  append(s, *pb, 1);
  s.token_ids.push_back(sep_id());
  s.token_type_ids.push_back(1);
  return s;
}

result<std::vector<token_span>> tokenizer::tokenize(std::string_view text,
                                                    bool add_special_tokens) const {
  auto p = pieces(text);
  if (!p) return p.error();
  std::vector<token_span> out;
  out.reserve(p->size() + 2);
  auto special = [&](int32_t id) { out.push_back({id, special_text(id), true, 0, 0}); };
  if (add_special_tokens) special(cls_id());
  for (const auto& x : *p)
    out.push_back({x.id, std::string(text.substr(x.start, x.stop - x.start)), false, x.start, x.stop});
  if (add_special_tokens) special(sep_id());
  return out;
}

void truncate_sequence(backends::sequence_input& s, int32_t max_length, int32_t sep_id) {
  if (max_length < 2 || static_cast<int32_t>(s.token_ids.size()) <= max_length) return;
  s.token_ids.resize(static_cast<size_t>(max_length));
  s.token_ids.back() = sep_id;
  if (!s.token_type_ids.empty()) s.token_type_ids.resize(static_cast<size_t>(max_length));
}

}  // namespace tessera::serving
