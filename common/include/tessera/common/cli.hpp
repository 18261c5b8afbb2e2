// tessera/common/cli.hpp: the command-line parse every tessera program makes, written once.
//
//   po::variables_map vm;
//   if (auto done = tessera::parse_command_line("tessera-loadgen", argc, argv, opts, vm)) return *done;
//
// --help prints the options to stdout and ends the program with 0, before any required option is
// checked; a parse or validation error prints "<program>: <what>; see <program> --help" to
// stderr and ends it with 2 (a user's mistake). Otherwise vm holds the options, notified.
// A later refusal (a file that does not parse, a model that does not load) is
//   if (!st.ok()) return tessera::exit_refused(st.to_string(), "tessera-loadgen");
#pragma once

#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

inline std::optional<int> parse_command_line(std::string_view program, int argc, const char* const* argv,
                                             const boost::program_options::options_description& opts,
                                             boost::program_options::variables_map& vm,
                                             const boost::program_options::positional_options_description* positional = nullptr) {
  namespace po = boost::program_options;
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "; see " << program << " --help\n";
    return 2;
  }
  return std::nullopt;
}

/// Prints `what` as a line to stderr, after "<program>: " when a program is named; returns 2, the
/// exit code of a run refused for the user's input.
inline int exit_refused(std::string_view what, std::string_view program = {}) {
  if (!program.empty()) std::cerr << program << ": ";
  std::cerr << what << "\n";
  return 2;
}

}  // namespace tessera
