// tessera/common/log.hpp: a tiny leveled logger to stderr, one line per call, thread-safe.
//
//   tessera::log::set_prefix("tile 3");
//   tessera::log::set_level(tessera::log::level::debug);   // or TESSERA_LOG=debug
//   TESSERA_LOG_INFO("registered with " << host_endpoint);
#pragma once

#include <sstream>
#include <string>

namespace tessera::log {

enum class level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(level l);
level current_level();
/// Reads TESSERA_LOG (debug|info|warn|error|off) if set.
void init_from_env();
/// Text put at the start of every line, e.g. "tile 3" or "host".
void set_prefix(std::string prefix);
void write(level l, const std::string& line);

}  // namespace tessera::log

#define TESSERA_LOG_AT(lvl, expr)                                        \
  do {                                                                   \
    if (static_cast<int>(lvl) >= static_cast<int>(::tessera::log::current_level())) { \
      std::ostringstream tessera_os_;                                    \
      tessera_os_ << expr;                                               \
      ::tessera::log::write(lvl, tessera_os_.str());                     \
    }                                                                    \
  } while (0)
#define TESSERA_LOG_DEBUG(expr) TESSERA_LOG_AT(::tessera::log::level::debug, expr)
#define TESSERA_LOG_INFO(expr) TESSERA_LOG_AT(::tessera::log::level::info, expr)
#define TESSERA_LOG_WARN(expr) TESSERA_LOG_AT(::tessera::log::level::warn, expr)
#define TESSERA_LOG_ERROR(expr) TESSERA_LOG_AT(::tessera::log::level::error, expr)
