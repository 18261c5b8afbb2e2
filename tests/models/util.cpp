#include "util.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace tessera::models::testing {
namespace fs = std::filesystem;

std::string data_dir() {
  if (const char* src = std::getenv("TESSERA_SOURCE_DIR")) return std::string(src) + "/tests/data/models";
  return (fs::path(__FILE__).parent_path().parent_path() / "data" / "models").string();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string make_temp_dir(const std::string& tag) {
  static int counter = 0;
  fs::path p = fs::temp_directory_path() /
               ("tessera-models-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace tessera::models::testing
