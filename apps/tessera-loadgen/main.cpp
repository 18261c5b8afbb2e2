// tessera-loadgen: drives a tessera (or TEI) server over HTTP, open or closed loop, with the
// seed's length mixes or a trace, and reports throughput and latency percentiles; with --openai,
// an OpenAI-compatible streaming server, with TTFT/TPOT, goodput at an SLO and rate sweeps.
// Parses options and wires parts; nothing else.
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/common/cli.hpp"
#include "tessera/common/llm_trace.hpp"
#include "tessera/loadgen/http_driver.hpp"
#include "tessera/loadgen/openai_driver.hpp"
#include "tessera/loadgen/workload.hpp"

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

// What the command line selects; an option either applies to it or is refused by name.
struct run_kind {
  bool llm = false, open = false, trace = false, sweep = false, prompt_ids = false;
};

// Options that do not apply everywhere: why not, for the kind at hand (nullptr: it applies).
// Options not listed apply in every mode.
struct option_rule {
  const char* name;
  std::function<const char*(const run_kind&)> refuse;
};

const std::vector<option_rule>& option_rules() {
  static const std::vector<option_rule> rules = {
      {"target", [](const run_kind& k) { return k.llm ? "does not apply with --openai (its routes are /v1/...)" : nullptr; }},
      {"mix", [](const run_kind& k) {
         return k.llm ? "does not apply with --openai (use --prompt-len and --output-len)"
                : k.trace ? "does not apply with --trace (the trace gives the lengths)" : nullptr;
       }},
      {"no-truncate", [](const run_kind& k) { return k.llm ? "does not apply with --openai (no truncate field)" : nullptr; }},
      {"rate", [](const run_kind& k) {
         return !k.open ? "applies only with --mode open"
                : k.trace ? "does not apply with --trace (the trace gives the arrivals; scale them with --time-scale)"
                : k.sweep ? "does not apply with --sweep (the sweep gives the rates)" : nullptr;
       }},
      {"connections", [](const run_kind& k) {
         return k.llm && k.open ? "does not apply with --openai in open loop (every request has its own connection)"
                                : nullptr;
       }},
      {"time-scale", [](const run_kind& k) {
         return !k.trace ? "applies only with --trace"
                : !k.open ? "applies only with --mode open (a closed loop ignores the trace's arrivals)" : nullptr;
       }},
      {"sweep", [](const run_kind& k) {
         return !k.llm ? "applies only with --openai"
                : !k.open ? "applies only with --mode open"
                : k.trace ? "does not apply with --trace (the trace gives the arrivals)" : nullptr;
       }},
      {"write-trace", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
      {"slo-ttft-ms", [](const run_kind& k) { return !k.llm ? "applies only with --openai (TTFT is a streamed answer's)" : nullptr; }},
      {"slo-tpot-ms", [](const run_kind& k) { return !k.llm ? "applies only with --openai (TPOT is a streamed answer's)" : nullptr; }},
      {"prompt-len", [](const run_kind& k) {
         return !k.llm ? "applies only with --openai"
                : k.trace ? "does not apply with --trace (the trace gives the prompts)" : nullptr;
       }},
      // With a trace that gives no output lengths (arrival_seconds,text_or_length) it applies;
      // with one that does, it is refused once the trace is read.
      {"output-len", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
      {"shared-prefix", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
      {"prompt-ids", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
      {"prompt-id-range", [](const run_kind& k) {
         return !k.llm ? "applies only with --openai" : !k.prompt_ids ? "applies only with --prompt-ids" : nullptr;
       }},
      {"model", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
      {"temperature", [](const run_kind& k) { return !k.llm ? "applies only with --openai" : nullptr; }},
  };
  return rules;
}

result<std::vector<double>> parse_rates(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* stop = nullptr;
    const double v = std::strtod(item.c_str(), &stop);
    if (item.empty() || *stop != '\0' || !std::isfinite(v) || v <= 0)
      return status::invalid("--sweep: '" + item + "' is not a rate > 0 (write r1,r2,... in requests per second)");
    out.push_back(v);
  }
  if (out.empty()) return status::invalid("--sweep: give at least one rate");
  return out;
}

// FILE for one rate of a sweep: "dir/run.csv" -> "dir/run-rate2.5.csv".
std::string per_rate_path(const std::string& path, double rate) {
  std::filesystem::path p(path);
  std::ostringstream r;
  r << rate;
  return (p.parent_path() / (p.stem().string() + "-rate" + r.str() + p.extension().string())).string();
}

status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out ? ok_status() : status::io_error(path + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  driver_config cfg;
  std::string mode, mix_name, trace, csv_path, json_path, sweep, write_trace;
  double rate = 0, time_scale = 1;
  int64_t requests = 0;
  uint64_t seed = 1;
  int port = 8080;
  bool no_truncate = false, quiet = false;
  std::string openai_api, prompt_len = "U[32,512]", output_len = "U[16,256]";
  llm_load_config lc;
  po::options_description opts(
      "tessera-loadgen: load a /predict endpoint, open loop (Poisson) or closed loop (fixed "
      "concurrency), or an OpenAI-compatible streaming server (--openai)\n\nExamples:\n"
      "  tessera-loadgen --mode closed --connections 64 --duration 10 --mix seed-40\n"
      "  tessera-loadgen --mode open --rate 300 --duration 30 --mix seed-0 --csv out.csv\n"
      "  tessera-loadgen --mode open --trace trace.csv      # arrival_seconds,text|length\n"
      "  tessera-loadgen --openai chat --mode closed --connections 64 --requests 64 \\\n"
      "      --prompt-len U[32,512] --output-len U[16,256]   # an OpenAI streaming server\n"
      "  tessera-loadgen --openai completions --mode open --trace azure.csv --time-scale 0.5 \\\n"
      "      --slo-ttft-ms 500 --slo-tpot-ms 50              # an Azure or BurstGPT trace, goodput\n"
      "  tessera-loadgen --openai completions --mode open --sweep 1,2,4,8 --requests 60 \\\n"
      "      --slo-ttft-ms 500 --slo-tpot-ms 50 --csv sweep.csv   # one row per rate\n\n"
      "An option that does not apply to the mode asked for is refused by name (exit 2).\n\nOptions");
  opts.add_options()
      ("help", "print this help")
      ("host", po::value(&cfg.host)->default_value("127.0.0.1"), "server host")
      ("port", po::value(&port)->default_value(8080), "server port")
      ("target", po::value(&cfg.target)->default_value("/predict"), "request path (not --openai)")
      ("mode", po::value(&mode)->default_value("closed"), "open | closed")
      ("rate", po::value(&rate)->default_value(100.0), "open loop: Poisson arrivals per second")
      ("connections", po::value(&cfg.connections)->default_value(64),
       "closed loop: concurrency; open loop (not --openai): most connections to open")
      ("duration", po::value(&cfg.duration_seconds)->default_value(10.0),
       "seconds to send for (0 = until --requests are done; --openai: no limit unless given)")
      ("requests", po::value(&requests)->default_value(0),
       "requests to send (0 = as many as --duration allows, or the whole --trace; --openai without "
       "--duration or --trace: 64); with --trace, its first N rows")
      ("mix", po::value(&mix_name)->default_value("seed-0"),
       "length mix (not --openai): seed-0 (8-64 tokens), seed-40 (40% 200-512 tokens), seed-<percent long>, short, long, fixed-<tokens>")
      ("trace", po::value(&trace),
       "trace file to replay instead of a mix: arrival_seconds,text_or_length; with --openai also "
       "arrival_seconds,prompt_tokens,output_tokens, Azure's LLM inference trace (TIMESTAMP,ContextTokens,"
       "GeneratedTokens) and BurstGPT (Timestamp,Model,Request tokens,Response tokens,...)")
      ("time-scale", po::value(&time_scale)->default_value(1.0),
       "--trace, open loop: multiply the trace's arrival times by this (0.5: twice as fast)")
      ("seed", po::value(&seed)->default_value(1), "random seed of lengths, texts and arrivals")
      ("no-truncate", po::bool_switch(&no_truncate), "send \"truncate\": false (not --openai)")
      ("timeout", po::value(&cfg.request_timeout_seconds)->default_value(60.0),
       "per-request timeout, seconds (--openai: 600 unless given)")
      ("csv", po::value(&csv_path), "append a CSV row (header when the file is new); --sweep: a row per rate")
      ("json", po::value(&json_path), "write the report as JSON (--sweep: an array, one per rate)")
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
      ("temperature", po::value(&lc.temperature)->default_value(0.0), "--openai: sampling temperature")
      ("slo-ttft-ms", po::value(&lc.slo_ttft_ms)->default_value(0.0),
       "--openai: goodput's bound on the time to first token, ms (0: not checked)")
      ("slo-tpot-ms", po::value(&lc.slo_tpot_ms)->default_value(0.0),
       "--openai: goodput's bound on the time per output token after the first, ms (0: not checked); "
       "goodput = requests within both bounds per second, as vLLM's benchmark_serving and genai-perf count it")
      ("sweep", po::value(&sweep),
       "--openai, open loop: r1,r2,... run once per request rate (each --requests or --duration long)")
      ("write-trace", po::value(&write_trace),
       "--openai: write the requests sent as arrival_seconds,prompt_tokens,output_tokens (tokens as the "
       "server counted them), for tessera-llm-timing simulate --trace; --sweep: FILE-rate<r>.csv per rate");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-loadgen", argc, argv, opts, vm)) return *done;
  const run_kind kind{!openai_api.empty(), mode == "open", vm.count("trace") > 0, vm.count("sweep") > 0, lc.prompt_ids};
  // Every option applies in the mode asked for or is refused by name in it (an option that did
  // nothing would leave a user measuring something else than they asked for).
  for (const auto& rule : option_rules()) {
    if (!vm.count(rule.name) || vm[rule.name].defaulted()) continue;
    if (rule.name == std::string("prompt-ids") && !lc.prompt_ids) continue;  // a switch left off
    if (rule.name == std::string("no-truncate") && !no_truncate) continue;
    if (const char* why = rule.refuse(kind))
      return tessera::exit_refused("--" + std::string(rule.name) + " " + why, "tessera-loadgen");
  }
  if (mode != "open" && mode != "closed") return tessera::exit_refused("--mode must be open or closed", "tessera-loadgen");
  if (port < 1 || port > 65535) return tessera::exit_refused("--port must be 1..65535", "tessera-loadgen");
  if (!(time_scale > 0) || !std::isfinite(time_scale))
    return tessera::exit_refused("--time-scale must be a number > 0", "tessera-loadgen");
  if (!(cfg.duration_seconds >= 0) || requests < 0)
    return tessera::exit_refused("--duration and --requests must be >= 0", "tessera-loadgen");
  if (!openai_api.empty()) {
    auto pl = length_dist::parse(prompt_len);
    auto ol = length_dist::parse(output_len);
    if (!pl || !ol) return tessera::exit_refused(!pl ? pl.error().message() : ol.error().message(), "tessera-loadgen");
    if (vm.count("prompt-id-range")) {
      const std::string r = vm["prompt-id-range"].as<std::string>();
      if (std::sscanf(r.c_str(), "%d-%d", &lc.id_lo, &lc.id_hi) != 2)
        return tessera::exit_refused("--prompt-id-range takes lo-hi", "tessera-loadgen");
    }
    if (kind.trace) {
      auto t = read_llm_trace(trace);
      if (!t) return tessera::exit_refused(t.error().to_string(), "tessera-loadgen");
      if (t->has_output() && !vm["output-len"].defaulted())
        return tessera::exit_refused("--output-len does not apply with --trace " + trace + " (its rows give the output lengths)",
                                     "tessera-loadgen");
      if (t->skipped > 0 && !quiet)
        std::cerr << "tessera-loadgen: " << trace << ": " << t->skipped << " rows with 0 prompt or output tokens skipped "
                  << "(the first on line " << t->first_skipped_line << ")\n";
      lc.trace = std::move(t->rows);
      lc.trace_name = "trace:" + std::filesystem::path(trace).filename().string() + " (" + t->format + ")";
    }
    lc.host = cfg.host;
    lc.port = static_cast<uint16_t>(port);
    lc.api = openai_api;
    lc.mode = mode == "open" ? loop_mode::open : loop_mode::closed;
    lc.concurrency = cfg.connections;
    lc.rate = rate;
    lc.duration_seconds = vm["duration"].defaulted() ? 0 : cfg.duration_seconds;
    lc.requests = requests > 0 ? requests : (lc.duration_seconds > 0 || kind.trace) ? 0 : 64;
    lc.time_scale = time_scale;
    lc.prompt = *pl;
    lc.output = *ol;
    lc.seed = seed;
    lc.request_timeout_seconds = vm["timeout"].defaulted() ? 600 : cfg.request_timeout_seconds;
    lc.progress = !quiet;
    std::vector<double> rates{rate};
    if (kind.sweep) {
      auto r = parse_rates(sweep);
      if (!r) return tessera::exit_refused(r.error().message(), "tessera-loadgen");
      rates = *r;
    }
    std::vector<llm_report> reports;
    for (double r : rates) {
      lc.rate = r;
      if (kind.sweep && !quiet) std::cerr << "[loadgen] sweep: " << r << " req/s\n";
      auto report = run_llm_load(lc);
      if (!report) return tessera::exit_refused(report.error().message(), "tessera-loadgen");
      print_report(*report, csv_path, llm_csv_header());
      if (!write_trace.empty()) {
        const std::string path = kind.sweep ? per_rate_path(write_trace, r) : write_trace;
        if (auto st = write_text(path, format_llm_trace(report->requests)); !st.ok())
          return tessera::exit_refused(st.to_string(), "tessera-loadgen");
      }
      reports.push_back(std::move(*report));
    }
    if (!json_path.empty()) {
      std::string text;
      if (kind.sweep) {
        text = "[\n";
        for (size_t i = 0; i < reports.size(); ++i) text += (i ? ",\n" : "") + to_json(reports[i]);
        text += "]\n";
      } else {
        text = to_json(reports.front());
      }
      if (auto st = write_text(json_path, text); !st.ok()) return tessera::exit_refused(st.to_string(), "tessera-loadgen");
    }
    for (const auto& r : reports)
      if (r.ok == 0 || r.errors != 0) return 1;
    return 0;
  }
  if ((mode == "open" && trace.empty() && rate <= 0) || (cfg.duration_seconds <= 0 && requests <= 0 && trace.empty()))
    return tessera::exit_refused("need --rate > 0 in open loop, and --duration or --requests", "tessera-loadgen");
  cfg.port = static_cast<uint16_t>(port);
  cfg.mode = mode == "open" ? loop_mode::open : loop_mode::closed;
  cfg.truncate = !no_truncate;
  cfg.progress = !quiet;
  cfg.max_requests = cfg.mode == loop_mode::closed ? requests : 0;

  std::vector<planned_request> plan;
  if (!trace.empty()) {
    auto t = read_trace(trace, seed);
    if (!t) return tessera::exit_refused(t.error().to_string(), "tessera-loadgen");
    plan = std::move(*t);
    if (requests > 0 && static_cast<size_t>(requests) < plan.size()) plan.resize(static_cast<size_t>(requests));
    for (auto& p : plan) p.arrival_seconds *= time_scale;
    cfg.mix_name = "trace:" + std::filesystem::path(trace).filename().string();
    if (cfg.mode == loop_mode::open && vm["duration"].defaulted()) cfg.duration_seconds = 0;
    if (cfg.mode == loop_mode::open && plan.back().arrival_seconds > 0)
      cfg.offered_rate = static_cast<double>(plan.size()) / plan.back().arrival_seconds;
  } else {
    auto mix = mix_preset(mix_name);
    if (!mix) return tessera::exit_refused(mix.error().message(), "tessera-loadgen");
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
