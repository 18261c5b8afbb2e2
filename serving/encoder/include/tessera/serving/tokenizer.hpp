// tessera/serving/tokenizer.hpp: what the HTTP front door needs of a tokenizer, so that
// serving does not depend on one implementation (models::wordpiece_tokenizer through
// model_adapters.hpp, or the toy tokenizer in tessera/toys/toy_model.hpp for tests).
//
// An implementation gives word pieces with ids and byte offsets, and its [CLS]/[SEP] ids; this
// class adds the specials and truncates as Hugging Face's fast tokenizer does (which is what
// text-embeddings-inference runs): the budget is max_length minus the specials, a pair is cut
// "longest first" (the shorter keeps up to half, the longer takes the rest), and the side cut
// is the right end (keep the first tokens) or the left end (keep the last ones).
//
//   std::shared_ptr<const tokenizer> tok = toys::make_toy_tokenizer();
//   auto seq = tok->encode("hello world", 0);        // [CLS] hello world [SEP], untruncated
//   auto cut = tok->encode_pair("question", "a long passage ...", 512);   // truncated to 512
//   auto end = tok->encode("a long text ...", 512, truncation_side::left);  // its last tokens
//   auto toks = tok->tokenize("hello world", true);  // [CLS] hello world [SEP] with offsets
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/status.hpp"

namespace tessera::serving {

/// Which end of a too-long input truncation removes tokens from.
enum class truncation_side { right, left };

/// One word piece of a text: its id and the bytes text[start, stop) it came from.
struct text_piece {
  int32_t id = 0;
  size_t start = 0;
  size_t stop = 0;
};

/// One token of a tokenized text (what /tokenize shows).
struct token_span {
  int32_t id = 0;
  std::string text;      ///< the bytes of the input it covers; the token itself for a special
  bool special = false;  ///< added by the tokenizer ([CLS], [SEP]); then start/stop mean nothing
  size_t start = 0;      ///< byte offsets into the input
  size_t stop = 0;
};

class tokenizer {
 public:
  virtual ~tokenizer() = default;

  /// Word pieces of `text`, no specials added, with byte offsets. Thread-safe.
  virtual result<std::vector<text_piece>> pieces(std::string_view text) const = 0;
  virtual int32_t cls_id() const { return 101; }
  /// The id of [SEP] (kept last by truncation).
  virtual int32_t sep_id() const { return 102; }
  /// The text of a special token ("[CLS]").
  virtual std::string special_text(int32_t id) const = 0;
  /// RoBERTa's pair layout: <s> a </s></s> b </s>, every token type 0 (RobertaProcessing and
  /// XLM-R's template), instead of BERT's [CLS] a [SEP] b [SEP] with types 0.. 1...
  virtual bool roberta_pairs() const { return false; }

  /// [CLS] text [SEP], truncated to max_length tokens (0 = no truncation) at `side`.
  result<backends::sequence_input> encode(std::string_view text, int32_t max_length,
                                      truncation_side side = truncation_side::right) const;
  /// [CLS] a [SEP] b [SEP] with token type ids 0.. then 1.., truncated longest first to
  /// max_length tokens (0 = no truncation) at `side`.
  result<backends::sequence_input> encode_pair(std::string_view a, std::string_view b,
                                           int32_t max_length,
                                           truncation_side side = truncation_side::right) const;
  /// The tokens of `text` with their byte offsets; [CLS]/[SEP] around them when asked.
  result<std::vector<token_span>> tokenize(std::string_view text, bool add_special_tokens) const;
};

/// Cuts `s` to `max_length` tokens (>= 2) keeping a final [SEP]; no-op when it already fits.
void truncate_sequence(backends::sequence_input& s, int32_t max_length, int32_t sep_id);

}  // namespace tessera::serving
