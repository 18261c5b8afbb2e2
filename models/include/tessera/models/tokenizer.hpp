// tessera/models/tokenizer.hpp: BERT's WordPiece tokenizer, id-for-id equal to Hugging Face's
// BertTokenizer on the same vocab.
//
// Basic tokenizer (drop control chars and U+FFFD, whitespace to space, split CJK ideographs,
// lower-case + strip accents (NFD, drop Mn) for uncased vocabs, split on punctuation and
// whitespace), then greedy longest-match-first WordPiece with "##" continuations; a word over
// 100 chars or with no match is [UNK]; special tokens typed in the text ("[SEP]") stay whole.
// encode() adds [CLS]/[SEP] and truncates to max_length.
//
//   auto tok = wordpiece_tokenizer::from_vocab_file("model/vocab.txt", {.lower_case = true});
//   if (!tok) return tok.error();
//   auto e = tok->encode_pair("How old are you?", "I'm 6.");   // ids + token_type_ids
//   if (!e) std::cerr << e.error().to_string();                // e.g. invalid UTF-8 at byte 7
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/batch.hpp"

namespace tessera::models {

/// Token strings and ids (line number in vocab.txt).
class vocabulary {
 public:
  /// Parses vocab.txt text: one token per line ('\n' or "\r\n"); the last line may lack '\n'.
  static result<vocabulary> from_text(std::string_view text, std::string_view source = "vocab.txt");
  static result<vocabulary> from_file(const std::string& path);
  /// The deterministic built-in vocab used with presets (uncased): [PAD]=0, [unused*], [UNK]=100,
  /// [CLS]=101, [SEP]=102, [MASK]=103, characters, common words and "##" pieces, padded with
  /// [unused*] up to `size` entries.
  static vocabulary builtin(int size = 30522);

  /// Id of a token, or -1.
  int32_t id(std::string_view token) const;
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  /// vocab.txt text.
  std::string to_text() const;

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
};

/// One word piece of a text and the bytes of the text it came from.
struct word_piece {
  std::string piece;   ///< e.g. "##ing"; "[UNK]" for an unknown word; a special typed in the text
  int32_t id = 0;      ///< vocab id ([UNK]'s id when the piece is not in the vocab)
  size_t start = 0;    ///< first byte in the text (UTF-8 byte offset)
  size_t stop = 0;     ///< one past the last byte: the piece came from text[start, stop)
};

struct tokenizer_options {
  bool lower_case = true;        ///< HF do_lower_case (uncased vocabs)
  int strip_accents = -1;        ///< -1: follow lower_case (HF default None); 0 no; 1 yes
  bool tokenize_chinese_chars = true;
  int max_length = 512;          ///< encode() truncates to this many ids, specials included
  int max_input_chars_per_word = 100;
};

class wordpiece_tokenizer {
 public:
  /// Needs [UNK], [CLS] and [SEP] in the vocab.
  static result<wordpiece_tokenizer> create(std::shared_ptr<const vocabulary> vocab,
                                            tokenizer_options opts = {});
  static result<wordpiece_tokenizer> from_vocab_file(const std::string& path,
                                                     tokenizer_options opts = {});

  /// Word pieces of a text, e.g. "unaffable" -> "una", "##ffa", "##ble". Special tokens written in
  /// the text ([PAD] [UNK] [CLS] [SEP] [MASK]) are kept whole, as Hugging Face does.
  result<std::vector<std::string>> tokenize(std::string_view text) const;
  /// Word pieces with ids and the byte range of the original text each came from, as Hugging
  /// Face's fast tokenizer reports offsets: a piece covers the characters it was normalised from
  /// (accents stripped, case folded), "##" pieces only their own characters, [UNK] its whole word.
  result<std::vector<word_piece>> tokenize_with_offsets(std::string_view text) const;
  /// Ids of the word pieces (no [CLS]/[SEP] added).
  result<std::vector<int32_t>> token_ids(std::string_view text) const;
  /// [CLS] text [SEP], truncated to max_length; token_type_ids all 0.
  result<encoding> encode(std::string_view text) const;
  /// [CLS] a [SEP] b [SEP] with type ids 0...0 1...1; truncated longest-first to max_length.
  result<encoding> encode_pair(std::string_view a, std::string_view b) const;

  const vocabulary& vocab() const { return *vocab_; }
  int32_t cls_id() const { return cls_; }
  int32_t sep_id() const { return sep_; }
  int32_t unk_id() const { return unk_; }
  const tokenizer_options& options() const { return opts_; }

 private:
  /// Word pieces of text[begin, end) (a stretch without special tokens), appended to `out`.
  status tokenize_segment(std::string_view text, size_t begin, size_t end,
                          std::vector<word_piece>& out) const;

  std::shared_ptr<const vocabulary> vocab_;
  tokenizer_options opts_;
  int32_t unk_ = 0, cls_ = 0, sep_ = 0;
};

}  // namespace tessera::models
