// tessera/models/gguf_reader.hpp: GGUF files (llama.cpp's format, versions 2 and 3) as a model
// source: the header, every metadata value (arrays included), tensor infos, general.alignment and
// the data section, checked against the file's size before anything is read (overflow-safe); then
// a decoder of a gpt2 or llama-family architecture (general.architecture through the traits
// table), its hyper-parameters from the ARCH.* keys and its weights (F32, F16, BF16 and Q8_0,
// dequantised to fp32 at load; any other tensor type is refused by name).
//
// Tensor names and layouts are llama.cpp's (see gguf.hpp, the exporter): LLaMA's Q and K rows are
// permuted back from llama.cpp's adjacent rotary pairs to HF's rotate_half order, GPT-2's fused
// attn_qkv is split, so write_gguf followed by load_gguf_decoder gives the same weights bit for bit.
//
//   auto g = tessera::models::map_gguf("model.gguf");          // header, metadata, tensor infos
//   auto m = tessera::models::load_gguf_decoder("model.gguf");  // or load_decoder("model.gguf")
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/decoder.hpp"

namespace tessera::models {

/// GGUF metadata value types (the spec's numbering).
enum class gguf_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};

/// One metadata value. Scalars: integers in `i` (u64 above INT64_MAX refused), floats in `f`,
/// bool in `i` (0/1), text in `s`. Arrays: elem_type and either `strings` or `numbers` (integers
/// and bools as exact doubles up to 2^53, floats as doubles) — nested arrays are refused.
struct gguf_value {
  gguf_type type = gguf_type::u32;
  int64_t i = 0;
  double f = 0;
  std::string s;
  gguf_type elem_type = gguf_type::u32;
  std::vector<std::string> strings;
  std::vector<double> numbers;
  bool is_integer() const;
  bool is_float() const { return type == gguf_type::f32 || type == gguf_type::f64; }
};

/// One tensor info: ne as GGUF stores it (ne[0] the fastest-moving dimension), the ggml type,
/// the offset from the data section's start and the bytes it occupies there.
struct gguf_tensor_info {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t elements() const;
};

struct gguf_file {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  ///< where the data section starts in the file
  std::map<std::string, gguf_value, std::less<>> metadata;
  std::vector<gguf_tensor_info> tensors;  ///< in file order
  std::string source;                     ///< the path, for error messages
  const uint8_t* base = nullptr;          ///< the whole file (mapped or borrowed)
  uint64_t size = 0;
  std::shared_ptr<const void> storage;    ///< keeps the mapping alive

  const gguf_value* find(std::string_view key) const;
  const gguf_tensor_info* tensor(std::string_view name) const;
};

/// The name of a ggml tensor type (F32, Q4_K, ...; "type 99" when unknown).
std::string ggml_type_name(uint32_t type);

/// Parses GGUF bytes already in memory (borrowed: `data` must outlive the result). Every count,
/// length and offset is checked against `size` before use; errors name `source` and what lies.
result<gguf_file> parse_gguf(const void* data, uint64_t size, std::string source);
/// Memory-maps and parses a file.
result<gguf_file> map_gguf(const std::string& path);

/// A tensor's values as fp32 (F32 copied, F16/BF16 widened, Q8_0 dequantised: d * q per block of
/// 32). Other types: "Q4_K not supported: supported F32, F16, BF16, Q8_0".
result<std::vector<float>> gguf_tensor_f32(const gguf_file& file, const gguf_tensor_info& info);

/// The decoder shape the file's general.architecture and ARCH.* keys describe (the vocabulary
/// size from token_embd, tie_word_embeddings from output.weight's absence, bos/eos from
/// tokenizer.ggml.*). Errors name the key.
result<model_shape> gguf_decoder_shape(const gguf_file& file);

/// A decoder from a GGUF file: shape as gguf_decoder_shape, weights in fp32. With d = q8_0 the
/// Linear matrices the file holds as Q8_0 keep their blocks (never dequantised; Q and K rows
/// reordered for LLaMA as above) and run on the Q8_0 kernel (decoder_model::adopt_q8_0: the other
/// matrices quantised at load when their rows are whole blocks); the token (and position)
/// embedding is dequantised for its row lookups, and a tied LM head runs on token_embd's blocks.
/// Other d: the fp32 weights (the caller's set_dtype converts).
result<decoder_model> load_gguf_decoder(const std::string& path, dtype d = dtype::fp32);
result<decoder_model> gguf_decoder(const gguf_file& file, dtype d = dtype::fp32);

/// The file's tokenizer: tokenizer.ggml.model "gpt2" (tokens + merges: byte-level BPE) or "llama"
/// (tokens, scores, token_type: SentencePiece-style BPE with byte fallback; merges rebuilt from the
/// scores, a pair merging into the highest-scoring token first; control and unknown tokens
/// special; <s> added when tokenizer.ggml.add_bos_token is not false). Other models refused by name.
/// tokenizer.chat_template, when present, is the tokenizer's chat_template().
result<bpe_tokenizer> gguf_tokenizer(const gguf_file& file);
result<bpe_tokenizer> load_gguf_tokenizer(const std::string& path);

/// The tokenizer a decoder named `model` comes with: a folder's own (from_dir), a GGUF file's own
/// (gguf_tokenizer, its chat template included), else the preset `preset` (gpt2, llama).
result<bpe_tokenizer> load_decoder_tokenizer(const std::string& model, std::string_view preset);

/// True when the path ends in ".gguf" or the file starts with the GGUF magic.
bool looks_like_gguf(const std::string& path);

}  // namespace tessera::models
