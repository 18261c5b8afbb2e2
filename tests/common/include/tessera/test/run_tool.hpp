// Runs a tool of $TESSERA_BIN_DIR from the shell, as a user would, capturing its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessera::test_support {

/// $TESSERA_BIN_DIR/<name>, or "" when the variable is unset.
inline std::string tool_path(const std::string& name) {
  const char* dir = std::getenv("TESSERA_BIN_DIR");
  return dir == nullptr ? "" : std::string(dir) + "/" + name;
}

/// Runs `path args` with `redirect` appended (e.g. "2>/dev/null" or "2>&1") through the shell
/// (so `path` may start with VAR=value settings); returns the exit code (-1 when it could not run
/// or was killed) and fills `out` with what it printed.
inline int run_tool(const std::string& path, const std::string& args, std::string& out,
                    const std::string& redirect = "2>/dev/null") {
  out.clear();
  FILE* f = ::popen((path + " " + args + " " + redirect).c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace tessera::test_support
