#include "runtime/clock.h"

#include <fstream>
#include <string>

namespace txn::runtime {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

uint64_t clock_domain() {
  static const uint64_t domain = [] {
    const std::string id = boot_id();
    if (id.empty()) return uint64_t{0};
    uint64_t h = 0xcbf29ce484222325ull;   // FNV-1a
    for (unsigned char c : id) h = (h ^ c) * 0x100000001b3ull;
    return h == 0 ? uint64_t{1} : h;
  }();
  return domain;
}

}  // namespace txn::runtime
