#include <gtest/gtest.h>

#include "tessera/tile/tile_memory.hpp"

using namespace tessera;
using namespace tessera::tile;

namespace {
exchange::tensor_desc f32(uint32_t id, std::string name, int64_t n) { return {id, std::move(name), exchange::dtype::f32, {n}}; }
}  // namespace

TEST(TileMemory, AllocatesAlignedAndZeroed) {
  tile_memory m(2, 4096);
  auto a = m.allocate(f32(1, "a", 10));
  ASSERT_TRUE(a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data) % tile_memory::alignment, 0u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*a)->f32()[i], 0.f);
  EXPECT_EQ(m.used(), 64u);
}

TEST(TileMemory, OverCapacityNamesTileCapacityAndContents) {
  tile_memory m(5, 1024);
  ASSERT_TRUE(m.allocate(f32(1, "weights_q", 128)));  // 512 B
  auto b = m.allocate(f32(2, "activations", 200));     // 800 B: does not fit
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), errc::out_of_memory);
  const std::string& msg = b.error().message();
  EXPECT_NE(msg.find("tile 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.0 KiB capacity"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weights_q"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activations"), std::string::npos) << msg;
}

TEST(TileMemory, FreeCoalescesAndHighWaterStays) {
  tile_memory m(0, 1024);
  ASSERT_TRUE(m.allocate(f32(1, "a", 64)));
  ASSERT_TRUE(m.allocate(f32(2, "b", 64)));
  ASSERT_TRUE(m.allocate(f32(3, "c", 64)));
  EXPECT_EQ(m.used(), 768u);
  ASSERT_TRUE(m.release(1).ok());
  ASSERT_TRUE(m.release(2).ok());
  // 512 contiguous bytes are free again after coalescing a and b.
  ASSERT_TRUE(m.allocate(f32(4, "d", 128)));
  EXPECT_EQ(m.used(), 768u);
  EXPECT_EQ(m.high_water(), 768u);
  ASSERT_TRUE(m.allocate(f32(5, "e", 64)));  // the last free 256 B
  EXPECT_EQ(m.high_water(), 1024u);
  EXPECT_EQ(m.release(99).code(), errc::not_found);
  EXPECT_EQ(m.allocate(f32(3, "dup", 1)).error().code(), errc::invalid_argument);
}

TEST(TileMemory, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(624 * 1024), "624.0 KiB");
  EXPECT_EQ(format_bytes(3ull << 20), "3.00 MiB");
}
