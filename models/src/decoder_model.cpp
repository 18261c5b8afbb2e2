// Decoder weights: the HF tensor list, binding (GPT-2's Conv1D transposed), seeded presets,
// Hugging Face folders (single file or sharded), saving.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tessera/models/decoder.hpp"
#include "tessera/common/text.hpp"
#include "model_folder.hpp"
#include "tessera/models/safetensors.hpp"
#include "tessera/models/gguf_reader.hpp"

namespace tessera::models {
namespace fs = std::filesystem;

std::vector<tensor_spec> expected_decoder_tensors(const model_shape& c) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_width(), kv = c.kv_width(), V = c.vocab_size;
  std::vector<tensor_spec> v;
  const auto& t = c.traits();
  if (t.conv1d_weights) {
    v.push_back({"wte.weight", {V, h}});
    v.push_back({"wpe.weight", {c.max_position_embeddings, h}});
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      v.push_back({p + "ln_1.weight", {h}});
      v.push_back({p + "ln_1.bias", {h}});
      v.push_back({p + "attn.c_attn.weight", {h, q + 2 * kv}});  // Conv1D: [in, out]
      v.push_back({p + "attn.c_attn.bias", {q + 2 * kv}});
      v.push_back({p + "attn.c_proj.weight", {q, h}});
      v.push_back({p + "attn.c_proj.bias", {h}});
      v.push_back({p + "ln_2.weight", {h}});
      v.push_back({p + "ln_2.bias", {h}});
      v.push_back({p + "mlp.c_fc.weight", {h, f}});
      v.push_back({p + "mlp.c_fc.bias", {f}});
      v.push_back({p + "mlp.c_proj.weight", {f, h}});
      v.push_back({p + "mlp.c_proj.bias", {h}});
    }
    v.push_back({"ln_f.weight", {h}});
    v.push_back({"ln_f.bias", {h}});
  } else {
    v.push_back({"model.embed_tokens.weight", {V, h}});
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      v.push_back({p + "input_layernorm.weight", {h}});
      v.push_back({p + "self_attn.q_proj.weight", {q, h}});
      if (t.qkv_bias) v.push_back({p + "self_attn.q_proj.bias", {q}});
      v.push_back({p + "self_attn.k_proj.weight", {kv, h}});
      if (t.qkv_bias) v.push_back({p + "self_attn.k_proj.bias", {kv}});
      v.push_back({p + "self_attn.v_proj.weight", {kv, h}});
      if (t.qkv_bias) v.push_back({p + "self_attn.v_proj.bias", {kv}});
      v.push_back({p + "self_attn.o_proj.weight", {h, q}});
      if (t.o_bias) v.push_back({p + "self_attn.o_proj.bias", {h}});
      v.push_back({p + "post_attention_layernorm.weight", {h}});
      v.push_back({p + "mlp.gate_proj.weight", {f, h}});
      v.push_back({p + "mlp.up_proj.weight", {f, h}});
      if (t.mlp_bias) v.push_back({p + "mlp.up_proj.bias", {f}});
      v.push_back({p + "mlp.down_proj.weight", {h, f}});
      if (t.mlp_bias) v.push_back({p + "mlp.down_proj.bias", {h}});
    }
    v.push_back({"model.norm.weight", {h}});
  }
  if (!c.tie_word_embeddings) v.push_back({"lm_head.weight", {V, h}});
  return v;
}

namespace {

// GPT2LMHeadModel's names carry "transformer."; GPT2Model's (the hub's gpt2 files) do not.
std::string canonical_decoder_name(const model_shape& s, std::string_view name) {
  std::string n(name);
  if (s.traits().conv1d_weights && n.rfind("transformer.", 0) == 0) n = n.substr(12);
  return n;
}

// Row-major [rows, cols] -> [cols, rows].
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t B = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B)
      for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + B); ++c) dst[c * rows + r] = src[r * cols + c];
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

std::string gigabytes(int64_t b) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << static_cast<double>(b) / 1e9 << " GB";
  return s.str();
}

}  // namespace

int64_t step_batch::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : seqs) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

result<decoder_model> decoder_model::bind(const model_shape& shape, std::map<std::string, tensor_view> tensors,
                                          std::shared_ptr<const void> storage, std::string_view source) {
  TESSERA_RETURN_IF_ERROR(shape.validate());
  if (!shape.is_decoder()) return status::invalid(shape.name + " is not a decoder (" + decoder_model_types() + ")");
  decoder_model m;
  m.shape_ = shape;
  m.storage_ = std::move(storage);
  for (auto& [name, view] : tensors) m.tensors_[canonical_decoder_name(shape, name)] = view;
  const auto specs = expected_decoder_tensors(shape);
  TESSERA_RETURN_IF_ERROR(check_tensor_shapes(
      specs, m.tensors_, source,
      shape.traits().conv1d_weights ? ", with or without the \"transformer.\" prefix" : ""));
  auto p = [&](const std::string& n) { return m.tensors_.at(n).data; };
  const model_shape& c = shape;
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_width(), kv = c.kv_width();
  decoder_weights& w = m.w_;
  const auto& t = c.traits();
  auto maybe = [&](bool has, const std::string& n) -> const float* { return has ? p(n) : nullptr; };
  if (t.conv1d_weights) {
    // Conv1D weights [in, out] -> the kernels' [out, in], into one buffer. A matrix without data
    // (the GGUF reader keeping Q8_0 blocks instead, decoder_model::adopt_q8_0) stays null.
    int64_t room = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string pre = "h." + std::to_string(l) + ".";
      for (const char* n : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
        if (p(pre + n)) room += m.tensors_.at(pre + n).numel();
    }
    m.transposed_ = std::make_shared<std::vector<float, huge_page_allocator<float>>>(static_cast<size_t>(room));
    float* dst = m.transposed_->data();
    // Row-major [rows, cols] `name` transposed into dst (advanced), or null without data.
    auto transposed = [&](const std::string& name, int64_t rows, int64_t cols) -> float* {
      const float* src = p(name);
      if (!src) return nullptr;
      float* out = dst;
      transpose(src, rows, cols, out);
      dst += rows * cols;
      return out;
    };
    w.token_embedding = p("wte.weight");
    w.position_embedding = p("wpe.weight");
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string pre = "h." + std::to_string(l) + ".";
      decoder_layer_weights lw;
      lw.norm1_w = p(pre + "ln_1.weight");
      lw.norm1_b = p(pre + "ln_1.bias");
      if (float* qkv = transposed(pre + "attn.c_attn.weight", h, q + 2 * kv)) {
        lw.q_w = qkv;
        lw.k_w = qkv + q * h;
        lw.v_w = qkv + (q + kv) * h;
      }
      const float* qkv_b = p(pre + "attn.c_attn.bias");
      lw.q_b = qkv_b;
      lw.k_b = qkv_b + q;
      lw.v_b = qkv_b + q + kv;
      lw.o_w = transposed(pre + "attn.c_proj.weight", q, h);
      lw.o_b = p(pre + "attn.c_proj.bias");
      lw.norm2_w = p(pre + "ln_2.weight");
      lw.norm2_b = p(pre + "ln_2.bias");
      lw.up_w = transposed(pre + "mlp.c_fc.weight", h, f);
      lw.up_b = p(pre + "mlp.c_fc.bias");
      lw.down_w = transposed(pre + "mlp.c_proj.weight", f, h);
      lw.down_b = p(pre + "mlp.c_proj.bias");
      w.layers.push_back(lw);
    }
    w.final_norm_w = p("ln_f.weight");
    w.final_norm_b = p("ln_f.bias");
    w.lm_head = c.tie_word_embeddings ? w.token_embedding : p("lm_head.weight");
  } else {
    w.token_embedding = p("model.embed_tokens.weight");
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      decoder_layer_weights lw;
      lw.norm1_w = p(pre + "input_layernorm.weight");
      lw.q_w = p(pre + "self_attn.q_proj.weight");
      lw.k_w = p(pre + "self_attn.k_proj.weight");
      lw.v_w = p(pre + "self_attn.v_proj.weight");
      lw.q_b = maybe(t.qkv_bias, pre + "self_attn.q_proj.bias");
      lw.k_b = maybe(t.qkv_bias, pre + "self_attn.k_proj.bias");
      lw.v_b = maybe(t.qkv_bias, pre + "self_attn.v_proj.bias");
      lw.o_w = p(pre + "self_attn.o_proj.weight");
      lw.o_b = maybe(t.o_bias, pre + "self_attn.o_proj.bias");
      lw.norm2_w = p(pre + "post_attention_layernorm.weight");
      lw.gate_w = p(pre + "mlp.gate_proj.weight");
      lw.up_w = p(pre + "mlp.up_proj.weight");
      lw.up_b = maybe(t.mlp_bias, pre + "mlp.up_proj.bias");
      lw.down_w = p(pre + "mlp.down_proj.weight");
      lw.down_b = maybe(t.mlp_bias, pre + "mlp.down_proj.bias");
      w.layers.push_back(lw);
    }
    w.final_norm_w = p("model.norm.weight");
    w.lm_head = c.tie_word_embeddings ? w.token_embedding : p("lm_head.weight");
  }
  // Keep only the expected tensors (HF names): what save_decoder writes.
  std::map<std::string, tensor_view, std::less<>> kept;
  for (const auto& s : specs) kept[s.name] = m.tensors_.at(s.name);
  m.tensors_ = std::move(kept);
  return m;
}

const tensor_view* decoder_model::find(std::string_view hf_name) const {
  auto it = tensors_.find(canonical_decoder_name(shape_, hf_name));
  return it == tensors_.end() ? nullptr : &it->second;
}

result<decoder_model> make_seeded_decoder(const model_shape& shape, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(shape.validate());
  if (!shape.is_decoder()) return status::invalid(shape.name + " is an encoder, not a decoder (" + decoder_model_types() + ")");
  int64_t need = shape.parameter_count() * 4;
  if (shape.traits().conv1d_weights)  // the Conv1D weights' transposed copy
    need += int64_t{shape.num_layers} * 12 * shape.hidden_size * shape.hidden_size * 4;
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && need > avail)
    return status::out_of_memory(shape.name + " needs " + gigabytes(need) + " of fp32 weights but this machine has " +
                                 gigabytes(avail) + " available (MemAvailable): it is a shape for the timing model "
                                 "only here; use a smaller preset (gpt2, llama-1b) to run it");
  auto t = make_seeded_tensors(expected_decoder_tensors(shape), seed, fill_decoder_preset_tensor);
  return decoder_model::bind(shape, std::move(t.views), std::move(t.storage), "seeded weights");
}

result<decoder_model> make_seeded_decoder(const model_shape& shape, uint64_t seed, dtype d) {
  if (d != dtype::bf16 || shape.traits().conv1d_weights) {
    auto m = make_seeded_decoder(shape, seed);
    if (!m) return m.error();
    TESSERA_RETURN_IF_ERROR(m->set_dtype(d));
    return m;
  }
  TESSERA_RETURN_IF_ERROR(shape.validate());
  if (!shape.is_decoder()) return status::invalid(shape.name + " is an encoder, not a decoder (" + decoder_model_types() + ")");
  // bf16 matrices (2 bytes a weight), the fp32 embedding, and one fp32 matrix being packed.
  const int64_t embed = int64_t{shape.vocab_size} * shape.hidden_size;
  const int64_t need = (shape.parameter_count() - embed) * 2 + embed * 4 +
                       int64_t{shape.vocab_size} * shape.hidden_size * 4;
  const int64_t avail = available_memory_bytes();
  if (avail >= 0 && need > avail)
    return status::out_of_memory(shape.name + " needs " + gigabytes(need) + " for its bf16 weights but this machine has " +
                                 gigabytes(avail) + " available (MemAvailable)");
  return decoder_model::seeded_bf16(shape, seed);
}

result<decoder_model> make_preset_decoder(std::string_view preset, uint64_t seed, dtype d) {
  auto shape = shape_preset(preset);
  if (!shape) return shape.error();
  if (!shape->is_decoder())
    return status::invalid("\"" + std::string(preset) + "\" is an encoder preset, not a decoder (gpt2-*, llama-*)");
  auto m = make_seeded_decoder(*shape, seed, d);
  if (!m) return m.error();
  m->source = "preset:" + std::string(preset) + ":seed=" + std::to_string(seed);
  return m;
}

result<decoder_model> make_decoder_from_config(const std::string& config_path, uint64_t seed) {
  auto text = read_text_file(config_path);
  if (!text) return status::not_found(config_path + ": cannot read");
  auto shape = parse_decoder_config_json(*text);
  if (!shape) return shape.error().with_context(config_path);
  shape->name = fs::path(config_path).filename().string();
  auto m = make_seeded_decoder(*shape, seed);
  if (m) m->source = config_path + ":seed=" + std::to_string(seed);
  return m;
}

result<decoder_model> make_preset_decoder(std::string_view preset, uint64_t seed) {
  auto shape = shape_preset(preset);
  if (!shape) return shape.error();
  if (!shape->is_decoder())
    return status::invalid("\"" + std::string(preset) + "\" is an encoder preset, not a decoder (gpt2-*, llama-*)");
  auto m = make_seeded_decoder(*shape, seed);
  if (!m) return m.error();
  m->source = "preset:" + std::string(preset) + ":seed=" + std::to_string(seed);
  return m;
}

result<decoder_model> load_decoder(std::string_view path_or_preset, uint64_t preset_seed, dtype d) {
  const std::string path(path_or_preset);
  std::error_code ec;
  if (!fs::is_directory(path, ec) &&
      (fs::is_regular_file(path, ec) ? looks_like_gguf(path) : fs::path(path).extension() == ".gguf")) {
    auto m = load_gguf_decoder(path, d);
    if (!m) return m.error();
    TESSERA_RETURN_IF_ERROR(m->set_dtype(d));
    return m;
  }
  if (!fs::is_directory(path, ec) && detail::is_preset_name(path_or_preset))
    return make_preset_decoder(path_or_preset, preset_seed, d);
  auto m = load_decoder(path_or_preset, preset_seed);
  if (!m) return m.error();
  TESSERA_RETURN_IF_ERROR(m->set_dtype(d));
  return m;
}

result<decoder_model> load_decoder(std::string_view path_or_preset, uint64_t preset_seed) {
  const fs::path dir{std::string(path_or_preset)};
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    // A GGUF file, or a missing x.gguf (the reader's error names it rather than the presets).
    if (fs::is_regular_file(dir, ec) ? looks_like_gguf(dir.string()) : dir.extension() == ".gguf")
      return load_gguf_decoder(dir.string());
    if (detail::is_preset_name(path_or_preset)) return make_preset_decoder(path_or_preset, preset_seed);
    std::vector<std::string> decoders;
    for (const auto& n : preset_names())
      if (shape_preset(n)->is_decoder()) decoders.push_back(n);
    return detail::neither_folder_nor_preset(path_or_preset, "config.json, model.safetensors", "decoder preset",
                                             decoders);
  }
  const fs::path config_path = dir / "config.json";
  auto text = read_text_file(config_path);
  if (!text) return text.error();
  auto shape = parse_decoder_config_json(*text);
  if (!shape) return shape.error().with_context(config_path.string());
  shape->name = dir.string();

  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::map<std::string, tensor_view> tensors;
  std::vector<std::shared_ptr<const void>> keep;
  std::string source = single.string();
  if (fs::exists(single, ec)) {
    auto st = map_safetensors(single.string());
    if (!st) return st.error();
    tensors = std::move(st->tensors);
    keep.push_back(st->storage);
  } else if (fs::exists(index, ec)) {
    source = index.string();
    auto itext = read_text_file(index);
    if (!itext) return itext.error();
    std::map<std::string, std::string> weight_map;
    try {
      const auto j = nlohmann::json::parse(*itext);
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        return status::invalid(index.string() + ": needs an object \"weight_map\" {tensor: shard file}");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          return status::invalid(index.string() + ": weight_map entry \"" + it.key() + "\" must name a file");
        const auto file = it.value().get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos)
          return status::invalid(index.string() + ": weight_map entry \"" + it.key() + "\" names \"" + file +
                                 "\", not a file in the folder");
        weight_map[it.key()] = file;
      }
    } catch (const nlohmann::json::exception& e) {
      return status::invalid(index.string() + ": not valid JSON: " + e.what());
    }
    std::set<std::string> files;
    for (const auto& [name, file] : weight_map) files.insert(file);
    std::map<std::string, safetensors_file> shards;
    for (const auto& file : files) {
      auto st = map_safetensors((dir / file).string());
      if (!st) return st.error().with_context(index.string());
      keep.push_back(st->storage);
      shards[file] = std::move(*st);
    }
    // Each tensor from the shard the index names; its shape checked against that file.
    const auto specs = expected_decoder_tensors(*shape);
    for (const auto& [name, file] : weight_map) {
      const auto& shard = shards.at(file);
      auto it = shard.tensors.find(name);
      if (it == shard.tensors.end())
        return status::invalid((dir / file).string() + ": tensor \"" + name + "\" listed in " + index.string() +
                               " is missing from the shard");
      const std::string canon = canonical_decoder_name(*shape, name);
      for (const auto& s : specs)
        if (s.name == canon && it->second.shape != s.shape)
          return status::invalid((dir / file).string() + ": tensor \"" + canon + "\" has shape " +
                                 shape_string(it->second.shape) + ", expected " + shape_string(s.shape) +
                                 " from config.json");
      tensors[name] = it->second;
    }
  } else {
    const bool bin = fs::exists(dir / "pytorch_model.bin", ec);
    return status::not_found(single.string() + ": missing (and no model.safetensors.index.json)" +
                             (bin ? std::string("; only pytorch_model.bin is present: convert it to safetensors") : ""));
  }
  auto storage = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(keep));
  auto m = decoder_model::bind(*shape, std::move(tensors), std::shared_ptr<const void>(storage, storage.get()), source);
  if (!m) return m.error();
  m->source = dir.string();
  return m;
}

status save_decoder(const decoder_model& model, const std::string& dir_str) {
  const fs::path dir{dir_str};
  if (!model.holds_fp32_matrices())
    return status::unsupported("save_decoder: " + model.source + " holds its matrices only in " +
                               std::string(dtype_name(model.compute_dtype())) + "; load or build it in fp32 to save it");
  TESSERA_RETURN_IF_ERROR(detail::start_model_folder(dir, decoder_config_json(model.shape())));
  std::map<std::string, tensor_view> tensors;
  const bool gpt2 = model.shape().traits().conv1d_weights;
  for (const auto& spec : expected_decoder_tensors(model.shape())) {
    const std::string stored = gpt2 && spec.name != "lm_head.weight" ? "transformer." + spec.name : spec.name;
    tensors[stored] = *model.find(spec.name);
  }
  return write_safetensors((dir / "model.safetensors").string(), tensors);
}

}  // namespace tessera::models
