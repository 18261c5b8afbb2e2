// tessera-models: inspect a model, tokenize text, classify it with the reference forward, or write
// a preset out as a Hugging Face folder.
//
//   tessera-models --model bert-tiny --text "Hello, world!" --pair "Second part"
//   tessera-models --model bert-base --dtype bf16 --text "Hello"      (the bf16 forward)
//   tessera-models --model tests/data/models/tiny-odd --info
//   tessera-models --model bert-base --seed 3 --save /tmp/bert-base-seed3
//   tessera-models tokenize --tokenizer gpt2|llama|DIR --text "Hello world"   (tokenize.cpp)
//   tessera-models generate --model llama-tiny --prompt-ids 1,42,99 --max-tokens 16  (generate.cpp)
//   tessera-models export-gguf --model llama-tiny --out llama-tiny.gguf  (export_gguf.cpp)
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

int tokenize_main(int argc, char** argv);
int generate_main(int argc, char** argv);
int export_gguf_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "tokenize") return tokenize_main(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "generate") return generate_main(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "export-gguf") return export_gguf_main(argc - 1, argv + 1);
  std::string model_name, save_dir, dtype_text;
  std::vector<std::string> texts;
  std::string pair;
  uint64_t seed = 0;
  int threads = 2;
  po::options_description opts("tessera-models: BERT models, tokenizer and reference forward");
  opts.add_options()("help", "this help")("model", po::value(&model_name)->default_value("bert-tiny"),
                                          "preset name (bert-tiny ... bert-large) or Hugging Face folder")(
      "seed", po::value(&seed)->default_value(0), "preset weight seed")(
      "info", "print the config and tensor names")(
      "text", po::value(&texts)->multitoken(), "text(s) to tokenize and classify (one sequence each)")(
      "pair", po::value(&pair), "second text: classify --text as a sentence pair")(
      "threads", po::value(&threads)->default_value(2), "oneDNN/OpenMP threads")(
      "dtype", po::value(&dtype_text)->default_value("fp32"), "forward in fp32 (the reference), bf16, or int8 (the encoder's Linear layers; docs/models.md \"int8\")")(
      "save", po::value(&save_dir), "write the model as a Hugging Face folder");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-models", argc, argv, opts, vm)) return *done;
  const auto dt = parse_dtype(dtype_text, /*allow_int8=*/true);
  if (!dt) {
    std::cerr << dt.error().message() << "\n";
    return 2;
  }
  auto model = load_model(model_name, seed);
  if (!model) {
    std::cerr << model.error().to_string() << "\n";
    return 2;
  }
  if (const tessera::status st = set_dtype(*model, *dt); st.code() != tessera::errc::ok) {
    std::cerr << st.message() << "\n";
    return 2;
  }
  const bert_config& c = model->config;
  if (vm.count("info")) {
    std::cout << to_config_json(c) << "parameters: " << c.parameter_count() << "\nvocab: "
              << (model->vocab ? std::to_string(model->vocab->size()) + " tokens" : std::string("none")) << "\n";
    for (const auto& n : model->weights.names())
      std::cout << n << " " << shape_string(model->weights.find(n)->shape) << "\n";
  }
  if (!texts.empty()) {
    auto tok = model->make_tokenizer();
    if (!tok) {
      std::cerr << tok.error().to_string() << "\n";
      return 2;
    }
    packed_batch batch;
    for (const auto& t : texts) {
      auto e = vm.count("pair") ? tok->encode_pair(t, pair) : tok->encode(t);
      if (!e) {
        std::cerr << e.error().to_string() << "\n";
        return 2;
      }
      std::cout << "ids:";
      for (size_t i = 0; i < e->token_ids.size(); ++i)
        std::cout << " " << e->token_ids[i] << (e->token_type_ids[i] ? "'" : "") << "("
                  << tok->vocab().token(e->token_ids[i]) << ")";
      std::cout << "\n";
      batch.append(*e);
    }
    set_num_threads(threads);
    const auto logits = reference_forward(*model, batch);
    for (int s = 0; s < batch.num_seqs(); ++s) {
      std::cout << "logits[" << s << "]:";
      int best = 0;
      for (int l = 0; l < c.num_labels; ++l) {
        std::printf(" %s=%.5f", c.id2label[l].c_str(), logits[s * c.num_labels + l]);
        if (logits[s * c.num_labels + l] > logits[s * c.num_labels + best]) best = l;
      }
      std::cout << "  -> " << c.id2label[best] << "\n";
    }
  }
  if (!save_dir.empty()) {
    if (auto st = save_model(*model, save_dir); !st.ok()) return tessera::exit_refused(st.to_string());
    std::cout << "wrote " << save_dir << "\n";
  }
  return 0;
}
