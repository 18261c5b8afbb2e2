// tessera-fault-experiment: the fault matrix over real tile processes. Each row sends a load of
// requests through a tile group (bert-tiny by default) while one fault is injected, and reports
// what came back: answered, wrong (differs from the single-process reference by > 1e-4),
// errors, recoveries and their time, p99 latency during the fault, and what the tiles reported
// injecting (per kind) and discarding (duplicate or late slices).
//
//   tessera-fault-experiment                      # the whole matrix, ~1-2 minutes here
//   tessera-fault-experiment --only kill,drop --csv faults.csv
#include <signal.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "tessera/common/log.hpp"
#include "tessera/host/fault_harness.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::host;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  log::init_from_env();
  log::set_level(log::level::error);
  std::string csv, only, model = "bert-tiny";
  int requests = 200;
  po::options_description opts("tessera-fault-experiment: inject each fault kind under load and count the answers\nOptions");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&model)->default_value(model), "preset or Hugging Face folder")
      ("requests", po::value(&requests)->default_value(requests), "requests per fault (200 or more gives each fault a count worth comparing)")
      ("only", po::value(&only), "comma-separated fault names to run (default: all)")
      ("csv", po::value(&csv), "also write the table as CSV");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-fault-experiment", argc, argv, opts, vm)) return *done;
  if (requests < 1) return std::cerr << "tessera-fault-experiment: --requests must be positive\n", 2;
  const plan two_lanes{1, 1, 2, 1}, two_stages{1, 2, 1, 2};
  std::vector<fault_scenario> matrix = {
      {"none", "", model, 2, two_lanes},
      {"kill tile 1 (batch 3, superstep 2)", R"({"faults":[{"kind":"kill","tile":1,"batch":3,"superstep":2}]})", model, 2, two_lanes},
      {"sigstop tile 1 > heartbeat timeout", "", model, 2, two_lanes},
      {"sigstop tile 1 0.4 s < heartbeat timeout", "", model, 2, two_lanes},
      {"slow tile 0 compute x3", R"({"faults":[{"kind":"slow","tile":0,"factor":3}]})", model, 2, two_lanes},
      {"delay link 0->1 20 ms +-5", R"({"faults":[{"kind":"delay","from":0,"to":1,"ms":20,"jitter_ms":5}]})", model, 2, two_stages},
      {"drop 3% of slices", R"({"seed":1,"faults":[{"kind":"drop","fraction":0.03}]})", model, 2, two_lanes},
      {"duplicate 30% of slices", R"({"seed":2,"faults":[{"kind":"duplicate","fraction":0.3}]})", model, 2, two_lanes},
      {"reorder 30% of slices", R"({"seed":3,"faults":[{"kind":"reorder","fraction":0.3}]})", model, 2, two_lanes},
      {"corrupt 3% of slices", R"({"seed":4,"faults":[{"kind":"corrupt","fraction":0.03}]})", model, 2, two_lanes},
      {"partition tile 0 from tile 1 for 2 batches", R"({"faults":[{"kind":"partition","tiles":[0],"batch":2,"batches":2}]})", model, 2, two_lanes},
      {"stall tile 1 3 s at batch 3 > heartbeat timeout", R"({"faults":[{"kind":"stall","tile":1,"batch":3,"seconds":3}]})", model, 2, two_lanes},
      {"stall tile 1 0.4 s at batch 3 < timeouts", R"({"faults":[{"kind":"stall","tile":1,"batch":3,"superstep":1,"seconds":0.4}]})", model, 2, two_lanes},
  };
  matrix[11].heartbeat_timeout = 800ms;
  matrix[12].heartbeat_timeout = 3000ms;
  matrix[2].heartbeat_timeout = 800ms;
  // A signal that cannot be sent (the tile already gone) shows in the row: no fault, no recovery.
  matrix[2].during = [](tile_group& g) { (void)g.signal_tile(1, SIGSTOP); };
  matrix[3].heartbeat_timeout = 3000ms;
  matrix[3].during = [](tile_group& g) {
    (void)g.signal_tile(1, SIGSTOP);
    std::this_thread::sleep_for(400ms);
    (void)g.signal_tile(1, SIGCONT);
  };
  std::printf("| fault | requests | answered | wrong | errors | recoveries | retries | last recovery s | p99 s | total s | injected | discarded |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "fault,requests,answered,wrong,errors,recoveries,retries,last_recovery_s,p99_s,total_s";
    for (size_t k = 0; k < exchange::fault_kind_count; ++k)
      out << ",injected_" << exchange::fault_kind_name(static_cast<exchange::fault_kind>(k));
    out << ",discarded\n";
  }
  int bad = 0;
  for (auto& s : matrix) {
    if (!only.empty() && only.find(s.name.substr(0, s.name.find(' '))) == std::string::npos) continue;
    s.requests = requests;
    std::fprintf(stderr, "running: %s\n", s.name.c_str());
    auto r = run_fault_scenario(s);
    if (!r) {
      std::printf("| %s | %d | - | - | - | - | - | - | - | - | - | - |  (%s)\n", s.name.c_str(), requests, r.error().to_string().c_str());
      ++bad;
      continue;
    }
    std::printf("| %s | %d | %d | %d | %d | %lld | %lld | %.2f | %.3f | %.2f | %s | %llu |\n", s.name.c_str(), r->requests,
                r->answered, r->wrong, r->errors, (long long)r->recoveries, (long long)r->retries, r->last_recovery_seconds,
                r->p99_latency_seconds, r->seconds, exchange::describe_fault_counts(r->injected).c_str(),
                (unsigned long long)r->stale_messages);
    std::fflush(stdout);
    if (out) out << '"' << s.name << "\"," << r->requests << ',' << r->answered << ',' << r->wrong << ',' << r->errors
                 << ',' << r->recoveries << ',' << r->retries << ',' << r->last_recovery_seconds << ',' << r->p99_latency_seconds << ','
                 << r->seconds;
    if (out) {
      for (uint64_t n : r->injected) out << ',' << n;
      out << ',' << r->stale_messages << '\n';
    }
    if (r->answered != r->requests || r->wrong || r->errors) ++bad;
    // A planned fault the tiles never report (a kill's process is gone before it can) is a
    // broken injector, not a clean run.
    const bool reported = r->injected != exchange::fault_counts{};
    if (!s.plan_json.empty() && s.plan_json.find("\"kill\"") == std::string::npos && !reported) {
      std::printf("  (%s: the tiles report injecting nothing)\n", s.name.c_str());
      ++bad;
    }
  }
  return bad ? 1 : 0;
}
