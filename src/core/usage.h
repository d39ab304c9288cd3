#pragma once
// A process's or thread's own CPU (user + system) and voluntary context switches (the waits in which it slept:
// its wake-ups), by getrusage: what txn-server reports in its facts, txn-sim per committed transaction and
// txn-wakecost per wake-up (docs/efficiency.md).
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>

// tcmalloc's (gperftools), where the program is linked with it (nullptr otherwise).
extern "C" int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));

namespace txn {

struct Usage {
  double cpu_s = 0;
  long voluntary_switches = 0;
};

inline Usage own_usage(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return {static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6,
          u.ru_nvcsw};
}

// Its memory now: resident (/proc/self/statm), what the program has allocated, and what the allocator holds free
// without having handed it back to the system (its caches and free spans); -1 where not known.
struct Memory {
  long long rss = -1, allocated = -1, held_free = -1;
};

inline Memory own_memory() {
  Memory m;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    long long pages = 0, resident = 0;
    if (std::fscanf(f, "%lld %lld", &pages, &resident) == 2) m.rss = resident * sysconf(_SC_PAGESIZE);
    std::fclose(f);
  }
  if (MallocExtension_GetNumericProperty) {
    size_t allocated = 0, heap = 0, unmapped = 0;
    if (MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &allocated) &&
        MallocExtension_GetNumericProperty("generic.heap_size", &heap) &&
        MallocExtension_GetNumericProperty("tcmalloc.pageheap_unmapped_bytes", &unmapped)) {
      m.allocated = static_cast<long long>(allocated);
      m.held_free = static_cast<long long>(heap) - static_cast<long long>(unmapped) - m.allocated;
    }
  } else {
    const struct mallinfo2 i = mallinfo2();
    m.allocated = static_cast<long long>(i.uordblks + i.hblkhd);
    m.held_free = static_cast<long long>(i.fordblks);
  }
  return m;
}

}  // namespace txn
