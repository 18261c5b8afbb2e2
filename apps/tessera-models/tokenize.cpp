// `tessera-models tokenize`: GPT-2 / LLaMA BPE tokenization from the command line.
//
//   tessera-models tokenize --tokenizer gpt2 --text "Hello world"
//   ids: [15496,995]
//   tokens: ["Hello","Ġworld"]
//   tessera-models tokenize --tokenizer llama --decode 1 15043 3186
//   tessera-models tokenize --tokenizer DIR --jsonl < texts.jsonl   (one {"text": ...} a line; for tests)
#include <boost/program_options.hpp>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

namespace {

int jsonl_main(const std::string& name) {
  auto tok = bpe_tokenizer::load(name);
  if (!tok) {
    std::cerr << tok.error().to_string() << "\n";
    return 2;
  }
  std::string line;
  int n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    nlohmann::json in, out;
    try {
      in = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      std::cerr << "line " << n << ": " << e.what() << "\n";
      return 2;
    }
    const std::string text = in.value("text", "");
    auto ids = tok->encode(text, false);
    auto ids_special = tok->encode(text, true);
    if (!ids || !ids_special) {
      out["error"] = (ids ? ids_special : ids).error().to_string();
    } else {
      out["ids"] = *ids;
      out["ids_special"] = *ids_special;
      auto decoded = tok->decode(*ids);
      out["decoded"] = decoded ? *decoded : decoded.error().to_string();
      stream_decoder stream(*tok);
      std::string streamed;
      for (int32_t id : *ids_special) {
        auto piece = stream.push(id);
        streamed += piece ? *piece : "<error: " + piece.error().to_string() + ">";
      }
      streamed += stream.flush();
      out["streamed"] = streamed;
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace

int tokenize_main(int argc, char** argv) {
  std::string name;
  std::vector<std::string> texts;
  std::vector<int32_t> decode_ids;
  po::options_description opts("tessera-models tokenize: GPT-2 and LLaMA BPE tokenizers");
  opts.add_options()("help", "this help")(
      "tokenizer", po::value(&name)->default_value("gpt2"),
      "gpt2, llama (the real vocabularies) or a Hugging Face folder (tokenizer.json, or vocab.json + merges.txt)")(
      "text", po::value(&texts)->multitoken(), "text(s) to encode; prints ids, tokens and the decoded text")(
      "stdin", "encode all of standard input as one text")(
      "no-special", "do not add the post-processor's tokens (LLaMA's <s>)")(
      "no-parse-special", "special tokens typed in the text are plain text")(
      "decode", po::value(&decode_ids)->multitoken(), "ids to decode instead")(
      "skip-special", "--decode drops special tokens")(
      "jsonl", "read {\"text\": ...} lines from stdin; write {\"ids\", \"ids_special\", \"decoded\", \"streamed\"} "
               "lines (ids without and with the post-processor's tokens, decode of ids, the stream decoder's output)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-models tokenize", argc, argv, opts, vm)) return *done;
  if (vm.count("jsonl")) return jsonl_main(name);
  if (vm.count("stdin")) texts.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  if (texts.empty() && decode_ids.empty()) {
    std::cerr << "tokenize: pass --text, --stdin or --decode\n" << opts;
    return 2;
  }
  auto tok = bpe_tokenizer::load(name);
  if (!tok) {
    std::cerr << tok.error().to_string() << "\n";
    return 2;
  }
  auto quoted = [](const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  if (!decode_ids.empty()) {
    auto text = tok->decode(decode_ids, vm.count("skip-special") > 0);
    if (!text) {
      std::cerr << text.error().to_string() << "\n";
      return 2;
    }
    std::cout << "text: " << quoted(*text) << "\n";
  }
  for (const auto& t : texts) {
    auto ids = tok->encode(t, !vm.count("no-special"), !vm.count("no-parse-special"));
    if (!ids) {
      std::cerr << ids.error().to_string() << "\n";
      return 2;
    }
    std::cout << "ids: " << nlohmann::json(*ids).dump() << "\ntokens: [";
    for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? "," : "") << quoted(*tok->token_text((*ids)[i]));
    auto back = tok->decode(*ids, true);
    std::cout << "]\ncount: " << ids->size() << "\ndecoded: " << quoted(back ? *back : back.error().to_string()) << "\n";
  }
  return 0;
}
