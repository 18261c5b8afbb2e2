// tessera-models generate: greedy generation with a GPT-2 or LLaMA decoder (a preset, a Hugging
// Face folder, or seeded weights for a config.json), and writing a decoder as an HF folder.
//
//   tessera-models generate --model llama-tiny --prompt-ids 1,42,99 --max-tokens 16
//   tessera-models generate --config tests/data/models/decoders/llama-odd.config.json --save /tmp/odd
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/proc_status.hpp"
#include <nlohmann/json.hpp>
#include <cmath>

namespace po = boost::program_options;
using namespace tessera::models;

namespace {

tessera::result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long v = 0;
    try { v = std::stoll(item, &pos); } catch (...) { pos = 0; }
    if (pos == 0 || pos != item.size() || v < 0 || v > INT32_MAX)
      return tessera::status::invalid("--prompt-ids: \"" + item + "\" is not a token id (comma-separated integers)");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return tessera::status::invalid("--prompt-ids is empty");
  return ids;
}

}  // namespace

int generate_main(int argc, char** argv) {
  std::string model_name, prompt_ids, prompt_text, save_dir, config_path, tokenizer_name, dtype_text, json_path,
      logits_path;
  uint64_t seed = 0;
  int threads = 2, max_tokens = 16, block_tokens = 16, prefill_chunk = 0;
  po::options_description opts("tessera-models generate: greedy generation with a GPT-2 or LLaMA decoder");
  opts.add_options()("help", "this help")(
      "model", po::value(&model_name)->default_value("gpt2-tiny"),
      "decoder preset (gpt2-tiny, gpt2, gpt2-medium, llama-tiny, llama-1b) or Hugging Face folder")(
      "seed", po::value(&seed)->default_value(0), "preset weight seed")(
      "config", po::value(&config_path), "a config.json: seeded weights of that shape instead of --model")(
      "prompt-ids", po::value(&prompt_ids), "prompt as comma-separated token ids")(
      "prompt", po::value(&prompt_text), "prompt text, encoded by the tokenizer (with the bos token where it adds one)")(
      "tokenizer", po::value(&tokenizer_name),
      "tokenizer preset (gpt2, llama) or folder; default: the model folder's own, else the architecture's preset")(
      "max-tokens", po::value(&max_tokens)->default_value(16), "tokens to generate")(
      "stop-at-eos", "stop after the model's eos token")(
      "block-tokens", po::value(&block_tokens)->default_value(16), "KV cache block size in positions")(
      "prefill-chunk", po::value(&prefill_chunk)->default_value(0), "prefill in chunks of this many tokens (0 = one)")(
      "threads", po::value(&threads)->default_value(2), "oneDNN/OpenMP threads")(
      "dtype", po::value(&dtype_text)->default_value("fp32"),
      "fp32 (the reference), bf16 (bf16 matrices, fp32 accumulation, norms, softmax and logits) or q8_0 (matrices "
      "as GGUF Q8_0 blocks, a Q8_0 GGUF file's own kept as they are, dequantised inside the kernel; fp32 activations)")(
      "info", "print the config.json and the tensor names")(
      "json", po::value(&json_path),
      "write the generation as JSON: prompt and generated ids, each token's top-2 margin and max |logit|, seconds, "
      "this process's peak RSS (VmHWM)")(
      "logits", po::value(&logits_path),
      "write every generated token's logits as raw little-endian float32 [tokens][vocab] (the reference scripts/llm-7b "
      "compares the tiles with)")(
      "save", po::value(&save_dir), "write the model as a Hugging Face folder (config.json, model.safetensors)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-models generate", argc, argv, opts, vm)) return *done;
  if (threads < 1) {
    std::cerr << "--threads must be at least 1\n";
    return 2;
  }
  if (vm.count("prompt") && vm.count("prompt-ids")) {
    std::cerr << "give --prompt or --prompt-ids, not both\n";
    return 2;
  }
  const auto dt = parse_dtype(dtype_text, /*allow_int8=*/false, /*allow_q8_0=*/true);
  if (!dt) {
    std::cerr << dt.error().message() << "\n";
    return 2;
  }
  // A preset in bf16 is generated straight into bf16 (LLaMA family): llama-2-7b takes 13.5 GB of
  // bf16 matrices here, not 27 GB of fp32 weights and their copies.
  std::error_code dir_ec;
  const bool preset = config_path.empty() && !std::filesystem::exists(model_name, dir_ec) && shape_preset(model_name).ok();
  auto model = !config_path.empty() ? make_decoder_from_config(config_path, seed)
               : preset             ? make_preset_decoder(model_name, seed, *dt)
                                    : load_decoder(model_name, seed, *dt);
  if (!model) {
    std::cerr << model.error().to_string() << "\n";
    return 2;
  }
  if (const tessera::status st = model->set_dtype(*dt); !st.ok()) {
    std::cerr << st.message() << "\n";
    return 2;
  }
  if (vm.count("info")) {
    std::cout << decoder_config_json(model->shape()) << "parameters: " << model->shape().parameter_count() << "\n";
    for (const auto& spec : expected_decoder_tensors(model->shape()))
      std::cout << spec.name << " " << shape_string(spec.shape) << "\n";
  }
  if (!save_dir.empty()) {
    if (auto st = save_decoder(*model, save_dir); !st.ok()) return tessera::exit_refused(st.to_string());
    std::cout << "wrote " << save_dir << "\n";
  }
  if (!vm.count("prompt-ids") && !vm.count("prompt")) {
    if (vm.count("info") || !save_dir.empty()) return 0;
    std::cerr << "give --prompt-ids or --prompt\n" << opts;
    return 2;
  }
  std::optional<bpe_tokenizer> tok;
  if (vm.count("prompt")) {
    if (tokenizer_name.empty()) {
      namespace fs = std::filesystem;
      std::error_code ec;
      const bool own = fs::exists(fs::path(model_name) / "tokenizer.json", ec) ||
                       fs::exists(fs::path(model_name) / "vocab.json", ec) ||
                       (fs::is_regular_file(model_name, ec) && looks_like_gguf(model_name));  // the GGUF's own
      tokenizer_name = own ? model_name : std::string(model->shape().traits().tokenizer);
    }
    const bool from_gguf = tokenizer_name == model_name && looks_like_gguf(model_name);
    auto t = from_gguf ? load_gguf_tokenizer(model_name) : bpe_tokenizer::load(tokenizer_name);
    if (!t) {
      std::cerr << t.error().to_string() << "\n";
      return 2;
    }
    tok = std::move(*t);
  }
  auto ids = vm.count("prompt") ? tok->encode(prompt_text) : parse_ids(prompt_ids);
  if (!ids) {
    std::cerr << ids.error().to_string() << "\n";
    return 2;
  }
  set_num_threads(threads);
  generate_options o;
  o.max_tokens = max_tokens;
  o.stop_at_eos = vm.count("stop-at-eos") > 0;
  o.block_tokens = block_tokens;
  o.prefill_chunk = prefill_chunk;
  o.keep_logits = !logits_path.empty() || !json_path.empty();
  const auto t0 = std::chrono::steady_clock::now();
  auto g = greedy_generate(*model, *ids, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!g) {
    std::cerr << g.error().to_string() << "\n";
    return 2;
  }
  std::cout << "prompt ids:";
  for (int32_t t : *ids) std::cout << " " << t;
  std::cout << "\ngenerated ids:";
  for (int32_t t : g->tokens) std::cout << " " << t;
  std::cout << "\n";
  if (tok) {
    auto text = tok->decode(g->tokens);
    if (text) std::cout << "generated text: " << *text << "\n";
  }
  std::printf("%zu tokens in %.3f s (prefill included)\n", g->tokens.size(), s);
  if (!logits_path.empty()) {
    std::ofstream f(logits_path, std::ios::binary);
    for (const auto& row : g->logits) f.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * 4));
    if (!f) return tessera::exit_refused("--logits: cannot write " + logits_path);
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    j["model"] = model_name;
    j["dtype"] = dtype_text;
    j["seed"] = seed;
    j["prompt_ids"] = *ids;
    j["tokens"] = g->tokens;
    j["top2_margin"] = g->top2_margin;
    std::vector<double> max_abs;
    for (const auto& row : g->logits) {
      double m = 0;
      for (float v : row) m = std::max(m, double(std::abs(v)));
      max_abs.push_back(m);
    }
    j["max_abs_logit"] = max_abs;
    j["vocab_size"] = model->shape().vocab_size;
    j["seconds"] = s;
    j["threads"] = threads;
    j["vm_hwm_bytes"] = tessera::self_vm_hwm_bytes();
    std::ofstream f(json_path);
    f << j.dump(2) << "\n";
    if (!f) return tessera::exit_refused("--json: cannot write " + json_path);
  }
  return 0;
}

