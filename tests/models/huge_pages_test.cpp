// huge_page_allocator: large blocks are 2 MB-aligned, zero-filled, writable and freed; small ones
// come from operator new. Whether the kernel backs them with huge pages is its choice (THP
// settings, free 2 MB frames), so the test checks the memory, not the page size.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessera/models/huge_pages.hpp"

namespace tessera::models {
namespace {

TEST(huge_pages, large_vectors_are_aligned_zeroed_and_writable) {
  for (size_t n : {kHugePageMinBytes / 4, kHugePageMinBytes / 4 + 12345, size_t{3} << 20}) {
    std::vector<float, huge_page_allocator<float>> v(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (size_t{2} << 20), 0u) << n;
    size_t nonzero = 0;
    for (float x : v) nonzero += x != 0.0f;
    EXPECT_EQ(nonzero, 0u) << n;
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000);
    EXPECT_EQ(v[n - 1], static_cast<float>((n - 1) % 1000));
    v.resize(n * 2, 1.0f);  // reallocates: copy into a new block, the old one freed
    EXPECT_EQ(v[n - 1], static_cast<float>((n - 1) % 1000));
    EXPECT_EQ(v[2 * n - 1], 1.0f);
  }
  (void)process_anon_huge_bytes();  // readable or 0; never throws
}

TEST(huge_pages, small_vectors_use_the_ordinary_heap) {
  std::vector<int, huge_page_allocator<int>> v(100, 7);
  EXPECT_EQ(v[99], 7);
  v.assign(1000, 3);
  EXPECT_EQ(v[999], 3);
}

}  // namespace
}  // namespace tessera::models
