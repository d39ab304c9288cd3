#include "runtime/link_emulator.h"

#include <algorithm>
#include <cmath>

namespace txn::runtime {

TimeUs LinkEmulator::delivery_time(uint32_t src, uint32_t dst, TimeUs now, TimeUs last,
                                   std::mt19937_64& rng) const {
  if (m_.mechanism != "app") return now;
  TimeUs t = now + m_.one_way_us(src, dst);
  if (m_.jitter_ms > 0) {
    std::normal_distribution<double> n(0.0, m_.jitter_ms * 1000.0);
    t += static_cast<TimeUs>(std::llround(std::max(0.0, n(rng))));
  }
  return std::max(t, last);
}

}  // namespace txn::runtime
