// tessera-models export-gguf: a GPT-2 or LLaMA decoder (preset, Hugging Face folder, or seeded
// weights of a config.json) written as a GGUF v3 file (f32, or f16 or Q8_0 matrices) for llama.cpp, with its
// tokenizer and, when given, a chat template.
//
//   tessera-models export-gguf --model llama-tiny --out /tmp/llama-tiny.gguf
//   tessera-models export-gguf --model gpt2 --type f16 --chat-template-file chatml.jinja --out gpt2-f16.gguf
//   tessera-models export-gguf --config tests/data/models/decoders/llama-odd.config.json --out odd.gguf
#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tessera/models/gguf.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

int export_gguf_main(int argc, char** argv) {
  std::string model_name, config_path, tokenizer_name, out, type = "f32", template_file;
  uint64_t seed = 0;
  po::options_description opts("tessera-models export-gguf: a decoder as a GGUF file (f32) for llama.cpp");
  opts.add_options()("help", "this help")(
      "model", po::value(&model_name), "decoder preset (gpt2-tiny, gpt2, llama-tiny, llama-1b, ...) or Hugging Face folder")(
      "config", po::value(&config_path), "a config.json: seeded weights of that shape instead of --model")(
      "seed", po::value(&seed)->default_value(0), "weight seed of a preset or --config")(
      "tokenizer", po::value(&tokenizer_name),
      "tokenizer preset (gpt2, llama) or folder; default: the model folder's own, else the architecture's preset "
      "(cut to the model's vocab_size when larger)")(
      "type", po::value(&type)->default_value(type),
      "f32 (every tensor), f16 (matrices F16, rounded to nearest even; norms and biases F32) or q8_0 (matrices "
      "whose rows are whole blocks of 32 as Q8_0, the rest F32)")(
      "chat-template-file", po::value(&template_file),
      "a Jinja chat template written as tokenizer.chat_template (default: the tokenizer folder's own, if any)")(
      "out", po::value(&out), "the GGUF file to write");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-models export-gguf", argc, argv, opts, vm)) return *done;
  if (out.empty() || (model_name.empty() == config_path.empty())) {
    std::cerr << "export-gguf: give --out and one of --model or --config\n" << opts;
    return 2;
  }
  if (type != "f32" && type != "f16" && type != "q8_0") {
    std::cerr << "export-gguf: --type is f32, f16 or q8_0, not '" << type << "'\n";
    return 2;
  }
  gguf_write_options wo;
  wo.f16 = type == "f16";
  wo.q8_0 = type == "q8_0";
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().empty()) {
      std::cerr << "export-gguf: --chat-template-file " << template_file << ": cannot read it (or it is empty)\n";
      return 2;
    }
    wo.chat_template = ss.str();
  }
  auto model = config_path.empty() ? load_decoder(model_name, seed) : make_decoder_from_config(config_path, seed);
  if (!model) {
    std::cerr << model.error().to_string() << "\n";
    return 2;
  }
  if (tokenizer_name.empty()) {
    std::error_code ec;
    const bool own = !model_name.empty() && (std::filesystem::exists(std::filesystem::path(model_name) / "tokenizer.json", ec) ||
                                             std::filesystem::exists(std::filesystem::path(model_name) / "vocab.json", ec));
    tokenizer_name = own ? model_name : std::string(model->shape().traits().tokenizer);
  }
  auto tok = bpe_tokenizer::load(tokenizer_name);
  if (!tok) {
    std::cerr << tok.error().to_string() << "\n";
    return 2;
  }
  if (auto st = write_gguf(*model, *tok, out, wo); !st.ok()) {
    std::cerr << st.to_string() << "\n";
    return 2;
  }
  std::cout << "wrote " << out << " (" << std::filesystem::file_size(out) << " bytes, " << model->shape().name
            << ", " << type << ", tokenizer " << tokenizer_name
            << (wo.chat_template.empty() ? "" : ", chat template " + template_file) << ")\n";
  return 0;
}
