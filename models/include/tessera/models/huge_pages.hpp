// tessera/models/huge_pages.hpp: an allocator whose large blocks are asked for transparent huge
// pages (2 MB), for what a decode step streams through once a step: the decoders' weight matrices
// and the paged KV cache.
//
//   std::vector<float, huge_page_allocator<float>> k(n);   // zero-filled as any vector
//
// Why: with the kernel's THP setting "madvise" (Debian's default) anonymous memory gets 4 KB
// pages, and in a virtual machine every 4 KB of a stream is a TLB miss with a two-level page
// walk. On the 2-core KVM guest here a 512 MB read ran at 9.6-13.2 GB/s on 4 KB pages and
// 17.5-21.2 GB/s on huge pages, alternated at load 5-8 (tessera-bench-decoders --linear prints
// both rates; they move with the neighbours).
// Blocks from kHugePageMinBytes up are mmap'd 2 MB-aligned with madvise(MADV_HUGEPAGE) before
// their first touch; smaller ones come from operator new. Where the kernel gives no huge pages
// (THP "never", no free 2 MB frames) the memory is plain 4 KB pages: only the speed differs.
#pragma once

#include <cstddef>
#include <memory>

namespace tessera::models {

inline constexpr size_t kHugePageMinBytes = size_t{4} << 20;

/// `bytes` (>= kHugePageMinBytes) of zeroed memory, 2 MB-aligned, advised to use huge pages;
/// throws std::bad_alloc when mmap fails.
void* allocate_huge_pages(size_t bytes);
/// Frees what allocate_huge_pages(bytes) returned.
void free_huge_pages(void* p, size_t bytes) noexcept;
/// The huge-page share of the calling process's anonymous memory: AnonHugePages of
/// /proc/self/smaps_rollup in bytes (0 when unreadable), for tests and benches.
size_t process_anon_huge_bytes();

template <class T>
struct huge_page_allocator {
  using value_type = T;
  huge_page_allocator() noexcept = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePageMinBytes) return std::allocator<T>().allocate(n);
    return static_cast<T*>(allocate_huge_pages(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePageMinBytes) return std::allocator<T>().deallocate(p, n);
    free_huge_pages(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const huge_page_allocator<U>&) const noexcept { return true; }
};

}  // namespace tessera::models
