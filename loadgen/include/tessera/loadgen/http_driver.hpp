// tessera/loadgen/http_driver.hpp: drives a TEI-style POST /predict endpoint over HTTP/1.1
// keep-alive connections (Beast, one Asio thread), open or closed loop, and measures.
//
// Open loop: requests leave at their planned arrival times whatever the server does; latency
// counts from the planned arrival (no coordinated omission), so a backlog shows as latency.
// Closed loop: `connections` clients, each sending its next request when the previous answer
// arrives.
//
//   driver_config cfg{.port = 8080, .mode = loop_mode::closed, .connections = 64,
//                     .duration_seconds = 10};
//   auto report = run_load(cfg, synthesize(mix_preset("seed-40").value(), 100000, 0, 1));
//   std::cout << to_table(*report);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/loadgen/workload.hpp"

namespace tessera::loadgen {

enum class loop_mode : uint8_t { open, closed };

struct driver_config {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string target = "/predict";
  loop_mode mode = loop_mode::closed;
  int connections = 64;            ///< closed: concurrency; open: most connections to open
  double duration_seconds = 0;     ///< stop sending after this (0 = when the plan is done)
  int64_t max_requests = 0;        ///< closed: stop after this many (0 = plan size, or cycle the
                                   ///< plan until duration_seconds when that is set)
  bool truncate = true;            ///< "truncate" in every request
  double request_timeout_seconds = 60;
  bool progress = true;            ///< a line on stderr every second
  std::string mix_name;            ///< copied into the report
  double offered_rate = 0;         ///< copied into the report (open loop)
};

/// Runs the load and reports. Fails only on setup errors (bad address); request failures are
/// counted in the report.
result<run_report> run_load(const driver_config& cfg, const std::vector<planned_request>& plan);

}  // namespace tessera::loadgen
