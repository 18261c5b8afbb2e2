// Anonymous memory advised to use transparent huge pages (tessera/models/huge_pages.hpp).
#include "tessera/models/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <new>
#include <string>

namespace tessera::models {

namespace {

constexpr size_t kHuge = size_t{2} << 20;

size_t round_up(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

}  // namespace

void* allocate_huge_pages(size_t bytes) {
  const size_t size = round_up(bytes);
  // Over-map by one huge page and trim to a 2 MB-aligned start (mmap only promises 4 KB).
  void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHuge - 1) / kHuge * kHuge;
  if (start > base) ::munmap(raw, start - base);
  const uintptr_t end = start + size, raw_end = base + size + kHuge;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  // Advice only: refused (THP "never", a kernel without THP) the memory stays plain pages.
  (void)::madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void free_huge_pages(void* p, size_t bytes) noexcept {
  if (p) ::munmap(p, round_up(bytes));
}

size_t process_anon_huge_bytes() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key;
  size_t kb = 0;
  while (f >> key) {
    if (key == "AnonHugePages:") {
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return 0;
}

}  // namespace tessera::models
