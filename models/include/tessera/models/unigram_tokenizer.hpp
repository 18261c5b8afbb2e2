// tessera/models/unigram_tokenizer.hpp: SentencePiece's Unigram model (XLM-RoBERTa's tokenizer)
// from a Hugging Face tokenizer.json, segmenting as Hugging Face's Unigram does.
//
// The pipeline: added tokens typed in the text ("<s>", "<mask>", lstrip/rstrip honoured) are split
// off first; each other stretch goes through the normalizer (Replace of a string, or of the regex
// " {2,}" XLM-R uses, Strip, Prepend, Sequence), the Metaspace pre-tokenizer (' ' -> U+2581, the
// prepend scheme, split before each U+2581) and the Viterbi segmentation: the path of vocabulary
// pieces with the highest total log-probability score; a character no single-character piece
// covers is unknown with score min_score - 10, and consecutive unknowns fuse into one unk token.
// Ties keep the piece that starts earliest (HF's encode_optimized). Anything else in the file
// (SentencePiece's Precompiled charsmap normalizer, byte_fallback, another model or pre-tokenizer)
// is refused by name when loading, never ignored.
//
//   auto tok = unigram_tokenizer::from_file("model/tokenizer.json");
//   if (!tok) return tok.error();
//   auto ids = tok->encode("Hello world");   // <s> ... </s>
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/tokenizer.hpp"

namespace tessera::models {

struct unigram_tokenizer_impl;

class unigram_tokenizer {
 public:
  static result<unigram_tokenizer> from_tokenizer_json(std::string_view json, std::string_view source = "tokenizer.json");
  static result<unigram_tokenizer> from_file(const std::string& path);

  /// Pieces of a text (no specials added) with the byte range of the text each came from.
  result<std::vector<word_piece>> tokenize_with_offsets(std::string_view text) const;
  /// Ids of the pieces; add_special wraps them in the post-processor's tokens (<s> ... </s>).
  result<std::vector<int32_t>> encode(std::string_view text, bool add_special = true) const;

  int32_t bos_id() const;  ///< the post-processor's first token (<s>), or -1
  int32_t eos_id() const;  ///< its last token (</s>), or -1
  int32_t unk_id() const;
  int32_t vocab_size() const;
  /// The vocabulary's piece of an id ("▁world"); an id outside the vocab is an error.
  result<std::string> token_text(int32_t id) const;

 private:
  std::shared_ptr<const unigram_tokenizer_impl> impl_;
};

}  // namespace tessera::models
