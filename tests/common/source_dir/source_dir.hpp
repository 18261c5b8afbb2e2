#pragma once
// The source tree a test binary was built from, for running it by hand (ctest sets
// TESSERA_SOURCE_DIR, which tests read first). Force-included into every test source by
// tessera_test(); the path itself is compiled into one generated object (source_dir.cpp.in), so no
// other object's compile line or text holds it and ccache serves a clone at any path.
extern const char* const tessera_test_source_dir;
#define TESSERA_TEST_SOURCE_DIR tessera_test_source_dir
