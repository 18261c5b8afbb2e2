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

// A held buffer (a slice received in place) is the tensor's storage, counts against the cap on
// top of the arena, is refused when it would pass the cap, and goes back into the arena, bytes
// intact, when an allocation needs the room.
TEST(TileMemory, HeldBuffersCountAgainstTheCapAndGiveWay) {
  tile_memory m(4, 1024);
  ASSERT_TRUE(m.allocate(f32(1, "x", 64)));  // 256 B
  ASSERT_TRUE(m.allocate(f32(2, "y", 32)));  // 128 B
  std::byte* arena_x = m.find(1)->data;
  auto buf = std::make_shared<std::vector<float>>(64);
  for (int i = 0; i < 64; ++i) (*buf)[i] = float(i) * 1.5f;
  std::weak_ptr<std::vector<float>> alive = buf;
  ASSERT_TRUE(m.hold(1, reinterpret_cast<std::byte*>(buf->data()), buf).ok());
  buf.reset();
  EXPECT_FALSE(alive.expired());  // the tile keeps it
  EXPECT_EQ(m.find(1)->f32()[10], 15.f);
  EXPECT_EQ(m.held_bytes(), 256u);
  EXPECT_EQ(m.used(), 384u);
  EXPECT_NE(m.fill_report().find("received in place"), std::string::npos) << m.fill_report();

  // Another 256 B held would make 384 + 512 = 896 <= 1024; a third would pass the cap.
  auto big = std::make_shared<std::vector<float>>(64, 7.f);
  ASSERT_TRUE(m.hold(1, reinterpret_cast<std::byte*>(big->data()), big).ok());  // replaces the first
  EXPECT_TRUE(alive.expired());
  EXPECT_EQ(m.held_bytes(), 256u);
  auto y = std::make_shared<std::vector<float>>(32, 3.f);
  ASSERT_TRUE(m.hold(2, reinterpret_cast<std::byte*>(y->data()), y).ok());
  EXPECT_EQ(m.held_bytes(), 384u);
  ASSERT_TRUE(m.allocate(f32(3, "z", 16)));  // 64 B: 448 arena + 384 held = 832, still fits
  EXPECT_EQ(m.held_bytes(), 384u);
  auto z = std::make_shared<std::vector<float>>(16, 1.f);
  ASSERT_TRUE(m.hold(3, reinterpret_cast<std::byte*>(z->data()), z).ok());  // 896
  auto over = std::make_shared<std::vector<float>>(64, 9.f);
  ASSERT_TRUE(m.allocate(f32(4, "w", 32)));  // 576 arena + 448 held = 1024: fits exactly
  EXPECT_EQ(m.held_bytes(), 448u);
  // Replacing x's 256 B is net zero; a held buffer for w (128 B) would pass the cap: refused, nothing changes.
  auto w = std::make_shared<std::vector<float>>(32, 2.f);
  std::byte* w_before = m.find(4)->data;
  auto refused = m.hold(4, reinterpret_cast<std::byte*>(w->data()), w);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), errc::out_of_memory);
  EXPECT_NE(refused.message().find("tile 4"), std::string::npos) << refused.message();
  EXPECT_EQ(m.find(4)->data, w_before);
  EXPECT_EQ(w.use_count(), 1);
  EXPECT_EQ(m.held_bytes(), 448u);
  // Misaligned for f32: refused.
  EXPECT_EQ(m.hold(1, reinterpret_cast<std::byte*>(over->data()) + 1, over).code(), errc::invalid_argument);
  EXPECT_EQ(m.find(1)->f32()[0], 7.f);

  // An allocation that needs the room copies held tensors back, largest first (x: 256 B).
  ASSERT_TRUE(m.release(3).ok());  // a held tensor released: its buffer goes with it
  EXPECT_EQ(m.held_bytes(), 384u);
  ASSERT_TRUE(m.allocate(f32(5, "v", 64)));  // 256 B: 768 arena + 384 held > 1024 -> x goes back
  EXPECT_EQ(m.find(1)->data, arena_x);
  EXPECT_FALSE(m.find(1)->held);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(m.find(1)->f32()[i], 7.f);
  EXPECT_EQ(m.held_bytes(), 128u);
  EXPECT_EQ(m.find(2)->f32()[31], 3.f);  // y stays held: it fits
  EXPECT_LE(m.used() + m.held_bytes(), m.capacity());
  // Past the arena itself: out of memory as before, even after every held buffer went back.
  EXPECT_EQ(m.allocate(f32(6, "u", 128)).error().code(), errc::out_of_memory);
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(m.find(2)->f32()[31], 3.f);
}
