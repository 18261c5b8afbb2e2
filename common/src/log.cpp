#include "tessera/common/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tessera::log {
namespace {
std::atomic<level> g_level{level::info};
std::mutex g_mu;
std::string g_prefix;  // guarded by g_mu
}  // namespace

void set_level(level l) { g_level.store(l); }
level current_level() { return g_level.load(std::memory_order_relaxed); }

void init_from_env() {
  const char* v = std::getenv("TESSERA_LOG");
  if (!v) return;
  if (!std::strcmp(v, "debug")) set_level(level::debug);
  else if (!std::strcmp(v, "info")) set_level(level::info);
  else if (!std::strcmp(v, "warn")) set_level(level::warn);
  else if (!std::strcmp(v, "error")) set_level(level::error);
  else if (!std::strcmp(v, "off")) set_level(level::off);
}

void set_prefix(std::string prefix) {
  std::lock_guard lk(g_mu);
  g_prefix = std::move(prefix);
}

void write(level l, const std::string& line) {
  static const char* names[] = {"debug", "info", "warn", "error", "off"};
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  std::lock_guard lk(g_mu);
  std::fprintf(stderr, "[%lld.%03lld %s%s%s] %s\n", static_cast<long long>(now / 1000 % 100000),
               static_cast<long long>(now % 1000), names[static_cast<int>(l)],
               g_prefix.empty() ? "" : " ", g_prefix.c_str(), line.c_str());
}

}  // namespace tessera::log
