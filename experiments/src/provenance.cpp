#include "tessera/experiment/provenance.hpp"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tessera/timing/preset.hpp"

namespace tessera::experiment {

namespace {

// First line of a command's stdout, or "" if it fails.
std::string first_line(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return "";
  char buf[256];
  std::string out;
  if (std::fgets(buf, sizeof buf, f) != nullptr) out = buf;
  const int rc = ::pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return rc == 0 ? out : "";
}

std::string quote_if_needed(const std::string& a) {
  if (!a.empty() && a.find_first_of(" \t\"'$\\") == std::string::npos) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string preset_path(const std::string& name) {
  if (name.find('/') != std::string::npos || name.ends_with(".json")) return name;
  return (timing::presets_dir() / (name + ".json")).string();
}

}  // namespace

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) return "unreadable";
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned i = 0; i < len; ++i) out += hex[md[i] >> 4], out += hex[md[i] & 15];
  return out;
}

provenance collect_provenance(int argc, char** argv, const std::vector<std::string>& presets,
                              const std::vector<uint64_t>& seeds) {
  provenance p;
  // The source tree the presets are read from: timing/presets -> the repository.
  const std::string repo = timing::presets_dir().parent_path().parent_path().string();
  const std::string git = "git -C " + quote_if_needed(repo);
  p.commit = first_line(git + " rev-parse --short HEAD 2>/dev/null");
  if (p.commit.empty()) {
    p.commit = "unknown";
  } else if (!first_line(git + " status --porcelain --untracked-files=no 2>/dev/null").empty()) {
    p.commit += "+changes";
  }
  for (int i = 0; i < argc; ++i) p.command += (i ? " " : "") + quote_if_needed(argv[i]);
  for (const auto& name : presets) p.presets.emplace_back(name, file_sha256(preset_path(name)));
  p.seeds = seeds;
  p.cores = std::thread::hardware_concurrency();
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) == 3) p.load1 = load[0], p.load5 = load[1], p.load15 = load[2];
  return p;
}

std::string provenance::comment_lines(const std::string& prefix) const {
  std::ostringstream s;
  s << prefix << "commit: " << commit << "\n" << prefix << "command: " << command << "\n";
  for (const auto& [name, hash] : presets) s << prefix << "preset " << name << ": " << hash << "\n";
  s << prefix << "seeds:";
  for (auto v : seeds) s << " " << v;
  char buf[128];
  std::snprintf(buf, sizeof buf, "\n%scores: %u\n%sload average at start: %.2f %.2f %.2f\n", prefix.c_str(), cores,
                prefix.c_str(), load1, load5, load15);
  s << buf;
  return s.str();
}

std::string provenance::markdown() const { return "\n## Provenance\n\n" + comment_lines("- "); }

std::string provenance::caption() const {
  std::ostringstream s;
  s << "commit " << commit << " | " << command << " | ";
  for (const auto& [name, hash] : presets) s << name << " " << hash.substr(0, 7 + 12) << " ";
  char buf[96];
  std::snprintf(buf, sizeof buf, "| %u cores, load %.2f", cores, load1);
  s << buf;
  return s.str();
}

}  // namespace tessera::experiment
