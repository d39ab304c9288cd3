// Monotonic microseconds for the runtime (timers, link emulation, latency).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "node.h"

namespace txn::runtime {
inline TimeUs steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// This kernel's boot id (/proc/sys/kernel/random/boot_id, the same in every container of a host; "" when
// unreadable): processes that report the same one share CLOCK_MONOTONIC.
std::string boot_id();
// The same as a number (a hash of it; 0 when unreadable): two processes with the same non-zero domain read one
// steady clock.
uint64_t clock_domain();
inline std::chrono::steady_clock::time_point steady_at(TimeUs us) {
  return std::chrono::steady_clock::time_point(std::chrono::microseconds(us));
}
}  // namespace txn::runtime
