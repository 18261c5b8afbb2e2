// write_gguf: a decoder as GGUF v3 (f32, f16 or Q8_0 matrices), laid out as llama.cpp reads it (see gguf.hpp).
#include "tessera/models/gguf.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_q8.hpp"
#include "mapped_file.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace tessera::models {
namespace {

// GGUF value types and the token types llama.cpp's vocabulary uses.
enum : uint32_t { t_u32 = 4, t_i32 = 5, t_f32 = 6, t_bool = 7, t_string = 8, t_array = 9, t_u64 = 10 };
enum : int32_t { tok_normal = 1, tok_unknown = 2, tok_control = 3, tok_byte = 6 };
constexpr uint64_t alignment = 32;

class header_writer {
 public:
  std::string bytes;
  uint64_t kv_count = 0;

  void raw(const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); }
  template <class T>
  void pod(T v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void key(const std::string& k, uint32_t type) {
    str(k);
    pod(type);
    ++kv_count;
  }
  void kv_u32(const std::string& k, uint32_t v) { key(k, t_u32); pod(v); }
  void kv_f32(const std::string& k, float v) { key(k, t_f32); pod(v); }
  void kv_bool(const std::string& k, bool v) { key(k, t_bool); pod<uint8_t>(v ? 1 : 0); }
  void kv_str(const std::string& k, const std::string& v) { key(k, t_string); str(v); }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, t_array);
    pod(t_string);
    pod<uint64_t>(v.size());
    for (const auto& s : v) str(s);
  }
  template <class T>
  void kv_array(const std::string& k, uint32_t elem, const std::vector<T>& v) {
    key(k, t_array);
    pod(elem);
    pod<uint64_t>(v.size());
    raw(v.data(), v.size() * sizeof(T));
  }
};

// One tensor: its GGUF name, dims (rows of `cols` floats; GGUF's ne = {cols, rows}) and a function
// that writes its rows in GGUF order.
struct gguf_tensor {
  std::string name;
  int64_t rows = 0, cols = 0;  // cols == 0: a vector of `rows` floats
  std::function<void(std::vector<float>&)> fill;
};

gguf_tensor plain(std::string name, const float* data, int64_t rows, int64_t cols) {
  return {std::move(name), rows, cols, [=](std::vector<float>& out) {
            out.assign(data, data + rows * std::max<int64_t>(cols, 1));
          }};
}

// Q or K [heads * d, in] from HF's rotate_half row order to llama.cpp's adjacent pairs.
gguf_tensor rope_permuted(std::string name, const float* data, int heads, int d, int64_t in) {
  return {std::move(name), int64_t{heads} * d, in, [=](std::vector<float>& out) {
            out.resize(static_cast<size_t>(int64_t{heads} * d * in));
            for (int h = 0; h < heads; ++h)
              for (int i = 0; i < d / 2; ++i)
                for (int s = 0; s < 2; ++s) {
                  const float* src = data + (int64_t{h} * d + s * (d / 2) + i) * in;
                  std::copy_n(src, in, out.data() + (int64_t{h} * d + 2 * i + s) * in);
                }
          }};
}

// Parts stacked row-wise (GPT-2's fused QKV weight or bias).
gguf_tensor stacked(std::string name, std::vector<std::pair<const float*, int64_t>> parts, int64_t cols) {
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.second;
  return {std::move(name), rows, cols, [=](std::vector<float>& out) {
            out.clear();
            for (const auto& [p, r] : parts) out.insert(out.end(), p, p + r * std::max<int64_t>(cols, 1));
          }};
}

status write_tokenizer(header_writer& hw, const model_shape& c, const bpe_tokenizer& tok,
                       const std::string& chat_template) {
  // llama.cpp's tokenizer kinds: "llama" (SentencePiece-style) for llama and mistral, "gpt2"
  // (byte-level) for gpt2 and qwen2, whose pre-tokenizer it names apart.
  const std::string_view arch = c.traits().gguf_arch;
  const bool llama = arch == "llama";
  if (llama != (tok.kind() == bpe_kind::sentencepiece))
    return status::invalid("a " + std::string(c.traits().model_type) + " model needs a " +
                           (llama ? "SentencePiece-style" : "byte-level") + " tokenizer");
  const int32_t n = c.vocab_size;
  if (tok.vocab_size() < n)
    return status::invalid("the tokenizer has " + std::to_string(tok.vocab_size()) + " tokens but the model's vocab_size is " +
                           std::to_string(n));
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), tok_normal);
  std::unordered_map<std::string, int32_t> seen;
  for (int32_t id = 0; id < n; ++id) {
    auto t = tok.token_text(id);
    if (!t || t->empty()) return status::invalid("the tokenizer has no token for id " + std::to_string(id));
    if (!seen.emplace(*t, id).second)
      return status::invalid("the tokenizer's ids " + std::to_string(seen[*t]) + " and " + std::to_string(id) +
                             " are the same token \"" + *t + "\"");
    tokens[static_cast<size_t>(id)] = *t;
    if (id == tok.unk_id()) types[static_cast<size_t>(id)] = tok_unknown;
    else if (tok.is_special(id)) types[static_cast<size_t>(id)] = tok_control;
    else if (llama && t->size() == 6 && t->starts_with("<0x") && t->back() == '>') types[static_cast<size_t>(id)] = tok_byte;
  }
  const int32_t bos = c.bos_token_id >= 0 ? c.bos_token_id : tok.bos_id();
  const int32_t eos = c.eos_token_id >= 0 ? c.eos_token_id : tok.eos_id();
  std::vector<bpe_merge> merges;
  for (const bpe_merge& m : tok.merges())
    if (m.left < n && m.right < n && m.merged < n) merges.push_back(m);
  hw.kv_str("tokenizer.ggml.model", llama ? "llama" : "gpt2");
  hw.kv_str("tokenizer.ggml.pre", llama ? "default" : arch == "qwen2" ? "qwen2" : "gpt-2");
  hw.kv_strings("tokenizer.ggml.tokens", tokens);
  if (llama) {
    // llama.cpp's SentencePiece tokenizer merges the adjacent pair whose result scores highest:
    // a token's score is minus the rank of the first merge that makes it (HF's BPE order).
    std::vector<float> scores(static_cast<size_t>(n), 0.0f);
    std::vector<uint8_t> scored(static_cast<size_t>(n), 0);
    for (size_t r = 0; r < merges.size(); ++r)
      if (!scored[static_cast<size_t>(merges[r].merged)]++) scores[static_cast<size_t>(merges[r].merged)] = -static_cast<float>(r);
    hw.kv_array("tokenizer.ggml.scores", t_f32, scores);
  }
  hw.kv_array("tokenizer.ggml.token_type", t_i32, types);
  if (!llama) {
    std::vector<std::string> text;
    text.reserve(merges.size());
    for (const bpe_merge& m : merges) text.push_back(tokens[static_cast<size_t>(m.left)] + " " + tokens[static_cast<size_t>(m.right)]);
    hw.kv_strings("tokenizer.ggml.merges", text);
  }
  if (bos >= 0 && bos < n) hw.kv_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  if (eos >= 0 && eos < n) hw.kv_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (tok.unk_id() >= 0 && tok.unk_id() < n) hw.kv_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(tok.unk_id()));
  hw.kv_bool("tokenizer.ggml.add_bos_token", llama);
  hw.kv_bool("tokenizer.ggml.add_eos_token", false);
  if (llama) hw.kv_bool("tokenizer.ggml.add_space_prefix", true);
  const std::string& tmpl = chat_template.empty() ? tok.chat_template() : chat_template;
  if (!tmpl.empty()) hw.kv_str("tokenizer.chat_template", tmpl);
  return {};
}

}  // namespace

status write_gguf(const decoder_model& model, const bpe_tokenizer& tokenizer, const std::string& path,
                  const gguf_write_options& options) {
  const model_shape& c = model.shape();
  const decoder_weights& w = model.weights();
  const architecture_traits& t = c.traits();
  if (options.f16 && options.q8_0) return status::invalid("write_gguf: f16 or q8_0 matrices, not both");
  if (!model.holds_fp32_matrices())
    return status::unsupported("GGUF export reads fp32 matrices, and " + model.source + " holds its matrices only in " +
                               std::string(dtype_name(model.compute_dtype())) + "; load or build it in fp32 to export it");
  if (!c.is_decoder() || t.gguf_arch.empty())
    return status::invalid("GGUF export is for gpt2, llama, qwen2 and mistral decoders, not " + c.name);
  if (c.rope_scaling == rope_scaling_kind::yarn)
    return status::unsupported("GGUF export of rope_scaling yarn is not written; export a model with linear, llama3 or "
                               "no scaling");
  // llama, qwen2 and mistral: rotary positions, RMSNorm, SwiGLU; gpt2: learned positions.
  const bool llama = t.positions == position_kind::rotary;
  const std::string arch(t.gguf_arch);
  if (llama && (c.activation != activation_kind::silu || !c.gated_mlp || c.norm != norm_kind::rms_norm))
    return status::invalid("llama.cpp's " + arch + " runs RMSNorm and a SwiGLU MLP; this model differs");
  // Mistral is "llama" in GGUF, and llama.cpp's llama attends to every position.
  if (c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings)
    return status::unsupported("GGUF export of a sliding_window (" + std::to_string(c.sliding_window) + " of " +
                               std::to_string(c.max_position_embeddings) + " positions) is not written: llama.cpp's " + arch +
                               " attends to every position, so the file would compute another model");
  if (!llama && (c.activation != activation_kind::gelu_tanh || c.norm != norm_kind::layer_norm))
    return status::invalid("llama.cpp's gpt2 runs LayerNorm and tanh-GELU (gelu_new); this model's activation is " +
                           std::string(activation_name(c.activation)));
  header_writer hw;
  hw.kv_str("general.architecture", arch);
  hw.kv_str("general.name", c.name);
  hw.kv_u32("general.file_type", options.f16 ? 1 : options.q8_0 ? 7 : 0);  // all f32, MOSTLY_F16 or MOSTLY_Q8_0
  hw.kv_u32(arch + ".context_length", static_cast<uint32_t>(c.max_position_embeddings));
  hw.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
  hw.kv_u32(arch + ".block_count", static_cast<uint32_t>(c.num_layers));
  hw.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  hw.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.num_heads));
  if (llama) {
    hw.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
    hw.kv_u32(arch + ".attention.key_length", static_cast<uint32_t>(c.head_dim()));
    hw.kv_u32(arch + ".attention.value_length", static_cast<uint32_t>(c.head_dim()));
    hw.kv_f32(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
    hw.kv_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
    hw.kv_f32(arch + ".rope.freq_base", c.rope_theta);
    if (c.rope_scaling == rope_scaling_kind::linear) {
      hw.kv_str(arch + ".rope.scaling.type", "linear");
      hw.kv_f32(arch + ".rope.scaling.factor", c.rope_scaling_factor);
    }
    hw.kv_u32(arch + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
  } else {
    hw.kv_f32(arch + ".attention.layer_norm_epsilon", c.norm_eps);
  }
  if (status st = write_tokenizer(hw, c, tokenizer, options.chat_template); !st.ok()) return st.with_context(path);

  const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  std::vector<gguf_tensor> ts;
  ts.push_back(plain("token_embd.weight", w.token_embedding, c.vocab_size, h));
  if (!llama) ts.push_back(plain("position_embd.weight", w.position_embedding, c.max_position_embeddings, h));
  for (int l = 0; l < c.num_layers; ++l) {
    const decoder_layer_weights& lw = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    ts.push_back(plain(b + "attn_norm.weight", lw.norm1_w, h, 0));
    if (lw.norm1_b) ts.push_back(plain(b + "attn_norm.bias", lw.norm1_b, h, 0));
    if (llama) {
      // convert_hf_to_gguf permutes Q and K to adjacent rotary pairs for llama, not for qwen2
      // (llama.cpp rotates qwen2 the NeoX way, as Hugging Face does).
      if (arch == "llama") {
        ts.push_back(rope_permuted(b + "attn_q.weight", lw.q_w, c.num_heads, c.head_dim(), h));
        ts.push_back(rope_permuted(b + "attn_k.weight", lw.k_w, c.num_kv_heads, c.head_dim(), h));
      } else {
        ts.push_back(plain(b + "attn_q.weight", lw.q_w, qw, h));
        ts.push_back(plain(b + "attn_k.weight", lw.k_w, kvw, h));
      }
      ts.push_back(plain(b + "attn_v.weight", lw.v_w, kvw, h));
      if (t.qkv_bias) {
        ts.push_back(plain(b + "attn_q.bias", lw.q_b, qw, 0));
        ts.push_back(plain(b + "attn_k.bias", lw.k_b, kvw, 0));
        ts.push_back(plain(b + "attn_v.bias", lw.v_b, kvw, 0));
      }
    } else {
      ts.push_back(stacked(b + "attn_qkv.weight", {{lw.q_w, qw}, {lw.k_w, kvw}, {lw.v_w, kvw}}, h));
      ts.push_back(stacked(b + "attn_qkv.bias", {{lw.q_b, qw}, {lw.k_b, kvw}, {lw.v_b, kvw}}, 0));
    }
    ts.push_back(plain(b + "attn_output.weight", lw.o_w, h, qw));
    if (lw.o_b) ts.push_back(plain(b + "attn_output.bias", lw.o_b, h, 0));
    ts.push_back(plain(b + "ffn_norm.weight", lw.norm2_w, h, 0));
    if (lw.norm2_b) ts.push_back(plain(b + "ffn_norm.bias", lw.norm2_b, h, 0));
    if (lw.gate_w) ts.push_back(plain(b + "ffn_gate.weight", lw.gate_w, f, h));
    ts.push_back(plain(b + "ffn_up.weight", lw.up_w, f, h));
    if (lw.up_b) ts.push_back(plain(b + "ffn_up.bias", lw.up_b, f, 0));
    ts.push_back(plain(b + "ffn_down.weight", lw.down_w, h, f));
    if (lw.down_b) ts.push_back(plain(b + "ffn_down.bias", lw.down_b, h, 0));
  }
  ts.push_back(plain("output_norm.weight", w.final_norm_w, h, 0));
  // Llama 3.1's rope_scaling as llama.cpp keeps it: rope_freqs.weight, one divisor a frequency
  // (the unscaled frequency over the scaled one), which llama.cpp applies to every layer's rotary.
  if (c.rope_scaling == rope_scaling_kind::llama3) {
    rope_params plain_rope = c.rope();
    plain_rope.kind = rope_kind::none;
    const std::vector<double> base = rope_inv_freq(plain_rope, c.head_dim()), scaled = rope_inv_freq(c.rope(), c.head_dim());
    auto factors = std::make_shared<std::vector<float>>(base.size());
    for (size_t i = 0; i < base.size(); ++i) (*factors)[i] = static_cast<float>(base[i] / scaled[i]);
    ts.push_back({"rope_freqs.weight", static_cast<int64_t>(factors->size()), 0,
                  [factors](std::vector<float>& out) { out = *factors; }});
  }
  if (w.final_norm_b) ts.push_back(plain("output_norm.bias", w.final_norm_b, h, 0));
  // A tied head is token_embd itself (llama.cpp falls back to it when output.weight is absent).
  if (!c.tie_word_embeddings) ts.push_back(plain("output.weight", w.lm_head, c.vocab_size, h));

  std::string out;
  out.append("GGUF", 4);
  auto put = [&out](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint32_t{3});
  put(static_cast<uint64_t>(ts.size()));
  put(hw.kv_count);
  out += hw.bytes;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  // F16 or Q8_0 for the matrices when asked; vectors stay F32 (as llama.cpp's converter keeps them).
  enum : uint32_t { ggml_f32 = 0, ggml_f16 = 1, ggml_q8_0 = 8 };
  auto type_of = [&options](const gguf_tensor& t) -> uint32_t {
    if (options.f16 && t.cols > 0) return ggml_f16;
    if (options.q8_0 && t.cols > 0 && t.cols % q8_0_block_values == 0) return ggml_q8_0;
    return ggml_f32;
  };
  auto bytes_of = [&](const gguf_tensor& t) -> uint64_t {
    const uint64_t n = static_cast<uint64_t>(t.rows * std::max<int64_t>(t.cols, 1));
    switch (type_of(t)) {
      case ggml_f16: return n * 2;
      case ggml_q8_0: return n / q8_0_block_values * q8_0_block_bytes;
      default: return n * 4;
    }
  };
  for (const gguf_tensor& t : ts) {
    header_writer ti;
    ti.str(t.name);
    if (t.cols > 0) {
      ti.pod<uint32_t>(2);
      ti.pod<uint64_t>(static_cast<uint64_t>(t.cols));
      ti.pod<uint64_t>(static_cast<uint64_t>(t.rows));
    } else {
      ti.pod<uint32_t>(1);
      ti.pod<uint64_t>(static_cast<uint64_t>(t.rows));
    }
    ti.pod<uint32_t>(type_of(t));
    ti.pod<uint64_t>(offset);
    out += ti.bytes;
    offsets.push_back(offset);
    offset += (bytes_of(t) + alignment - 1) / alignment * alignment;
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');

  const std::string tmp = path + ".partial";
  std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
  if (!file) return status::invalid(path + ": cannot open for writing");
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::vector<float> buf;
  std::vector<uint16_t> halves;
  std::vector<int8_t> q;
  std::string blocks;
  uint64_t written = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string pad(static_cast<size_t>(offsets[i] - written), '\0');
    file.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    ts[i].fill(buf);
    if (type_of(ts[i]) == ggml_q8_0) {  // blocks of an fp16 scale then 32 int8
      const int64_t n = static_cast<int64_t>(buf.size()), nb = n / q8_0_block_values;
      halves.resize(static_cast<size_t>(nb));
      q.resize(buf.size());
      quantize_q8_0(buf.data(), n, halves.data(), q.data());
      blocks.clear();
      for (int64_t b = 0; b < nb; ++b) {
        blocks.append(reinterpret_cast<const char*>(&halves[static_cast<size_t>(b)]), 2);
        blocks.append(reinterpret_cast<const char*>(q.data() + b * q8_0_block_values), q8_0_block_values);
      }
      file.write(blocks.data(), static_cast<std::streamsize>(blocks.size()));
      written = offsets[i] + blocks.size();
    } else if (type_of(ts[i]) == ggml_f16) {
      halves.resize(buf.size());
      for (size_t k = 0; k < buf.size(); ++k) halves[k] = detail::float_to_half(buf[k]);
      file.write(reinterpret_cast<const char*>(halves.data()), static_cast<std::streamsize>(halves.size() * 2));
      written = offsets[i] + halves.size() * 2;
    } else {
      file.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 4));
      written = offsets[i] + buf.size() * 4;
    }
  }
  file.close();
  std::error_code ec;
  if (!file) {
    std::filesystem::remove(tmp, ec);
    return status::invalid(path + ": write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return status::invalid(path + ": cannot rename the written file into place: " + ec.message());
  }
  return {};
}

}  // namespace tessera::models
