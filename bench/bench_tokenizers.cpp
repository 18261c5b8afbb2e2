// tessera-bench-tokenizers: encode throughput of a BPE tokenizer over documents (one
// {"text": ...} JSON line each), single thread, after loading. Prints one JSON line: bytes, seconds
// (best of --repeat; the word cache is warm after the first pass, so the first pass is reported too), MB/s, tokens and a 32-bit FNV-1a hash of all ids, which bench/bench_tokenizers.mjs
// compares with the npm implementations' (it prints the table).
//
//   tessera-bench-tokenizers --tokenizer gpt2 --input docs.jsonl --repeat 3
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

int main(int argc, char** argv) {
  std::string name, input;
  int repeat = 3;
  bool add_special = false;
  po::options_description opts("tessera-bench-tokenizers: BPE encode throughput");
  opts.add_options()("help", "this help")("tokenizer", po::value(&name)->default_value("gpt2"), "gpt2, llama or a folder")(
      "input", po::value(&input)->required(), "documents, one {\"text\": ...} JSON line each")(
      "repeat", po::value(&repeat)->default_value(3), "passes over the documents; the best is reported")(
      "add-special", po::bool_switch(&add_special), "add the post-processor's tokens (LLaMA's <s>)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-tokenizers", argc, argv, opts, vm)) return *done;
  std::ifstream f(input);
  if (!f) {
    std::cerr << input << ": cannot open\n";
    return 2;
  }
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (std::string line; std::getline(f, line);) {
    docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    bytes += docs.back().size();
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = bpe_tokenizer::load(name);
  if (!tok) {
    std::cerr << tok.error().to_string() << "\n";
    return 2;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double best = 1e30, first = 0;
  uint32_t hash = 0;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    uint32_t h = 2166136261u;  // FNV-1a, 32 bits (the JS side computes the same)
    size_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& d : docs) {
      auto ids = tok->encode(d, add_special);
      if (!ids) {
        std::cerr << ids.error().to_string() << "\n";
        return 2;
      }
      for (int32_t id : *ids) h = (h ^ static_cast<uint32_t>(id)) * 16777619u;
      n += ids->size();
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) first = took;
    best = std::min(best, took);
    hash = h;
    tokens = n;
  }
  std::cout << nlohmann::json{{"docs", docs.size()}, {"bytes", bytes}, {"seconds", best}, {"mb_per_s", bytes / best / 1e6},
                              {"first_seconds", first}, {"first_mb_per_s", bytes / first / 1e6},
                              {"tokens", tokens}, {"hash", hash}, {"load_seconds", load_s}}.dump()
            << "\n";
  return 0;
}
