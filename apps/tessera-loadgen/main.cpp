// tessera-loadgen: drives a tessera (or TEI) server over HTTP, open or closed loop, with the
// seed's length mixes or a trace, and reports throughput and latency percentiles.
// Parses options and wires parts; nothing else.
#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

#include "tessera/loadgen/http_driver.hpp"
#include "tessera/loadgen/openai_driver.hpp"
#include "tessera/loadgen/workload.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::loadgen;

namespace {

// The report as a table on stdout, and appended to the CSV at `csv_path` when one is named (with
// `header` first when the file is new or empty).
template <class Report>
void print_report(const Report& report, const std::string& csv_path, const std::string& header) {
  std::cout << to_table(report);
  if (csv_path.empty()) return;
  bool fresh = !std::filesystem::exists(csv_path) || std::filesystem::file_size(csv_path) == 0;
  std::ofstream out(csv_path, std::ios::app);
  if (fresh) out << header;
  out << to_csv_row(report);
}

}  // namespace

int main(int argc, char** argv) {
  driver_config cfg;
  std::string mode, mix_name, trace, csv_path, json_path;
  double rate = 0;
  int64_t requests = 0;
  uint64_t seed = 1;
  int port = 8080;
  bool no_truncate = false, quiet = false;
  std::string openai_api, prompt_len = "U[32,512]", output_len = "U[16,256]";
  llm_load_config lc;
  po::options_description opts(
      "tessera-loadgen: load a /predict endpoint, open loop (Poisson) or closed loop (fixed "
      "concurrency)\n\nExamples:\n"
      "  tessera-loadgen --mode closed --connections 64 --duration 10 --mix seed-40\n"
      "  tessera-loadgen --mode open --rate 300 --duration 30 --mix seed-0 --csv out.csv\n"
      "  tessera-loadgen --mode open --trace trace.csv      # arrival_seconds,text|length\n"
      "  tessera-loadgen --openai chat --mode closed --connections 64 --requests 64 \\\n"
      "      --prompt-len U[32,512] --output-len U[16,256]   # an OpenAI streaming server\n\nOptions");
  opts.add_options()
      ("help", "print this help")
      ("host", po::value(&cfg.host)->default_value("127.0.0.1"), "server host")
      ("port", po::value(&port)->default_value(8080), "server port")
      ("target", po::value(&cfg.target)->default_value("/predict"), "request path")
      ("mode", po::value(&mode)->default_value("closed"), "open | closed")
      ("rate", po::value(&rate)->default_value(100.0), "open loop: Poisson arrivals per second")
      ("connections", po::value(&cfg.connections)->default_value(64),
       "closed loop: concurrency; open loop: most connections to open")
      ("duration", po::value(&cfg.duration_seconds)->default_value(10.0), "seconds to send for (0 = until --requests are done)")
      ("requests", po::value(&requests)->default_value(0), "requests to send (0 = as many as --duration allows)")
      ("mix", po::value(&mix_name)->default_value("seed-0"),
       "length mix: seed-0 (8-64 tokens), seed-40 (40% 200-512 tokens), seed-<percent long>, short, long, fixed-<tokens>")
      ("trace", po::value(&trace), "CSV trace to replay instead of a mix: arrival_seconds,text_or_length")
      ("seed", po::value(&seed)->default_value(1), "random seed of lengths, texts and arrivals")
      ("no-truncate", po::bool_switch(&no_truncate), "send \"truncate\": false")
      ("timeout", po::value(&cfg.request_timeout_seconds)->default_value(60.0), "per-request timeout, seconds")
      ("csv", po::value(&csv_path), "append a CSV row (header when the file is new)")
      ("json", po::value(&json_path), "write the report as JSON")
      ("quiet", po::bool_switch(&quiet), "no progress lines on stderr")
      ("openai", po::value(&openai_api),
       "chat | completions: load an OpenAI-compatible server's /v1/chat/completions or /v1/completions, "
       "streamed, and report TTFT, TPOT, ITL, e2e and tokens/s (--connections: closed-loop clients)")
      ("prompt-len", po::value(&prompt_len)->default_value(prompt_len), "--openai: prompt tokens, N or U[lo,hi]")
      ("output-len", po::value(&output_len)->default_value(output_len),
       "--openai: output tokens, N or U[lo,hi] (exact: max_tokens with ignore_eos)")
      ("shared-prefix", po::value(&lc.shared_prefix_tokens)->default_value(0),
       "--openai: a system prompt of this many tokens shared by every request")
      ("prompt-ids", po::bool_switch(&lc.prompt_ids), "--openai completions: prompts as random token ids (exact lengths)")
      ("prompt-id-range", po::value<std::string>(), "--prompt-ids: ids drawn from lo-hi (default 100-1000)")
      ("model", po::value(&lc.model), "--openai: the \"model\" field")
      ("temperature", po::value(&lc.temperature)->default_value(0.0), "--openai: sampling temperature");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-loadgen", argc, argv, opts, vm)) return *done;
  // Every option applies in every mode or is refused by name in the one it does not (an option
  // that did nothing would leave a user measuring something else than they asked for).
  {
    static const std::set<std::string> encoder_only = {"target", "duration", "mix", "trace", "no-truncate", "json"};
    static const std::set<std::string> openai_only = {"prompt-len", "output-len", "shared-prefix", "prompt-ids",
                                                      "prompt-id-range", "model", "temperature"};
    const bool llm = !openai_api.empty();
    for (const auto& [name, value] : vm) {
      if (value.defaulted()) continue;
      if (llm && encoder_only.count(name))
        return tessera::exit_refused("--" + name + " does not apply with --openai (it drives /predict-style " +
                                         "endpoints); the OpenAI mode takes --requests, --prompt-len and --output-len",
                                     "tessera-loadgen");
      if (!llm && openai_only.count(name))
        return tessera::exit_refused("--" + name + " applies only with --openai", "tessera-loadgen");
    }
  }
  if (mode != "open" && mode != "closed") {
    std::cerr << "tessera-loadgen: --mode must be open or closed\n";
    return 2;
  }
  if (!openai_api.empty()) {
    auto pl = length_dist::parse(prompt_len);
    auto ol = length_dist::parse(output_len);
    if (!pl || !ol || port < 1 || port > 65535) {
      std::cerr << "tessera-loadgen: " << (!pl ? pl.error().message() : !ol ? ol.error().message() : "--port must be 1..65535")
                << "\n";
      return 2;
    }
    if (vm.count("prompt-id-range")) {
      const std::string r = vm["prompt-id-range"].as<std::string>();
      if (std::sscanf(r.c_str(), "%d-%d", &lc.id_lo, &lc.id_hi) != 2) {
        std::cerr << "tessera-loadgen: --prompt-id-range takes lo-hi\n";
        return 2;
      }
    }
    lc.host = cfg.host;
    lc.port = static_cast<uint16_t>(port);
    lc.api = openai_api;
    lc.mode = mode == "open" ? loop_mode::open : loop_mode::closed;
    lc.concurrency = cfg.connections;
    lc.rate = rate;
    lc.requests = requests > 0 ? requests : 64;
    lc.prompt = *pl;
    lc.output = *ol;
    lc.seed = seed;
    lc.request_timeout_seconds = vm["timeout"].defaulted() ? 600 : cfg.request_timeout_seconds;
    lc.progress = !quiet;
    auto report = run_llm_load(lc);
    if (!report) return tessera::exit_refused(report.error().message(), "tessera-loadgen");
    print_report(*report, csv_path, llm_csv_header());
    return report->ok > 0 && report->errors == 0 ? 0 : 1;
  }
  if (port < 1 || port > 65535 || (mode == "open" && trace.empty() && rate <= 0) ||
      (cfg.duration_seconds <= 0 && requests <= 0 && trace.empty())) {
    std::cerr << "tessera-loadgen: need a port in 1..65535, --rate > 0 in open loop, and "
                 "--duration or --requests\n";
    return 2;
  }
  cfg.port = static_cast<uint16_t>(port);
  cfg.mode = mode == "open" ? loop_mode::open : loop_mode::closed;
  cfg.truncate = !no_truncate;
  cfg.progress = !quiet;
  cfg.max_requests = cfg.mode == loop_mode::closed ? requests : 0;

  std::vector<planned_request> plan;
  if (!trace.empty()) {
    auto t = read_trace(trace, seed);
    if (!t) {
      std::cerr << "tessera-loadgen: " << t.error().to_string() << "\n";
      return 2;
    }
    plan = std::move(*t);
    cfg.mix_name = "trace:" + std::filesystem::path(trace).filename().string();
    if (cfg.mode == loop_mode::open && vm["duration"].defaulted()) cfg.duration_seconds = 0;
    if (cfg.mode == loop_mode::open && plan.back().arrival_seconds > 0)
      cfg.offered_rate = static_cast<double>(plan.size()) / plan.back().arrival_seconds;
  } else {
    auto mix = mix_preset(mix_name);
    if (!mix) {
      std::cerr << "tessera-loadgen: " << mix.error().message() << "\n";
      return 2;
    }
    cfg.mix_name = mix_name;
    int64_t n = requests > 0 ? requests
                : cfg.mode == loop_mode::open ? static_cast<int64_t>(rate * cfg.duration_seconds) + 1
                                              : 4096;  // cycled until the duration ends
    plan = synthesize(*mix, n, cfg.mode == loop_mode::open ? rate : 0.0, seed);
    cfg.offered_rate = cfg.mode == loop_mode::open ? rate : 0.0;
  }
  auto report = run_load(cfg, plan);
  if (!report) return tessera::exit_refused(report.error().to_string(), "tessera-loadgen");
  print_report(*report, csv_path, csv_header());
  if (!json_path.empty()) std::ofstream(json_path) << to_json(*report);
  return report->ok > 0 ? 0 : 1;
}
