// Huge pages for a kernel's large outputs.
//
// XLA:CPU allocates a call's buffers with malloc, and glibc maps one above
// its mmap threshold (at most 32 MiB) afresh on every call: each 4 KiB page
// then faults on its first write, inside the kernel. At the LSTM's B = 64
// the forward's rows, which write its saved rows and outputs (61 MB), took
// 19 ms a call, 6 with huge pages (BENCHMARKS.md, "Page faults in the
// kernels"). Asking for transparent huge pages on the buffer first (granted
// on request where /sys/kernel/mm/transparent_hugepage/enabled is madvise or
// always) turns 512 faults into one.

#ifndef LNORM_NATIVE_PAGES_H_
#define LNORM_NATIVE_PAGES_H_

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lnorm {

// Advises huge pages for the 2 MiB-aligned part of [p, p + bytes), for
// buffers of 8 MiB or more; a no-op elsewhere. Contents are unchanged.
inline void AdviseHugePages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (bytes < 4 * kHuge) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_PAGES_H_
