// tessera/experiment/provenance.hpp: what a results file needs to be traced and re-run: the
// commit (and whether the tree had changes), the exact command, the SHA-256 of every preset file
// the run read, the seeds, the machine's core count and its load average when the run started.
//
//   auto p = collect_provenance(argc, argv, {"ipu-mk2", "a100-40gb"}, {0, 1, 2});
//   out << p.comment_lines("# ");   // CSV header comments
//   out << p.markdown();            // a section for .md files
//   std::string caption = p.caption();  // one line for a PNG
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::experiment {

struct provenance {
  std::string commit;   ///< "c748e3b" or "c748e3b+changes", "unknown" outside a git checkout
  std::string command;  ///< argv joined with spaces (arguments with spaces quoted)
  std::vector<std::pair<std::string, std::string>> presets;  ///< preset name -> "sha256:<hex>" of its file
  std::vector<uint64_t> seeds;
  unsigned cores = 0;
  double load1 = 0, load5 = 0, load15 = 0;  ///< at the start of the run

  /// One "key: value" line per field, each prefixed (e.g. "# " for CSV comments).
  std::string comment_lines(const std::string& prefix) const;
  /// A markdown section ("Provenance" with a bullet per field).
  std::string markdown() const;
  /// One line for a figure caption.
  std::string caption() const;
};

/// Collects the run's provenance: the git commit of the source tree the presets come from, the
/// command, the presets' content hashes (a preset that cannot be read is hashed as "unreadable"),
/// the seeds, the core count and the load average.
provenance collect_provenance(int argc, char** argv, const std::vector<std::string>& presets,
                              const std::vector<uint64_t>& seeds);

/// "sha256:<64 hex digits>" of a file's bytes, or "unreadable" if it cannot be read.
std::string file_sha256(const std::string& path);

}  // namespace tessera::experiment
