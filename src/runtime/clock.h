// Monotonic microseconds for the runtime (timers, link emulation, latency).
#pragma once
#include <chrono>

#include "node.h"

namespace txn::runtime {
inline TimeUs steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline std::chrono::steady_clock::time_point steady_at(TimeUs us) {
  return std::chrono::steady_clock::time_point(std::chrono::microseconds(us));
}
}  // namespace txn::runtime
