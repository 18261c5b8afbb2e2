// Shared helpers for the models tests: where the golden data lives, small file utilities.
#pragma once

#include <string>

namespace tessera::models::testing {

/// tests/data/models under TESSERA_SOURCE_DIR (set by ctest), or relative to this source file.
std::string data_dir();
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
/// A fresh empty directory under the system temp dir.
std::string make_temp_dir(const std::string& tag);

}  // namespace tessera::models::testing
