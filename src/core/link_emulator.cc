#include "core/link_emulator.h"

#include <algorithm>
#include <cmath>

namespace txn {

TimeUs LinkEmulator::delivery_time(uint32_t src, uint32_t dst, TimeUs now, TimeUs last,
                                   std::mt19937_64& rng) const {
  if (m_.mechanism != "app") return now;
  TimeUs d = m_.one_way_us(src, dst);
  // Jitter on cross-region links only, as netem's `delay d sigma distribution normal`: the one-way delay is
  // a normal sample around d, clipped at 0 (exp_config keeps sigma small enough that clipping is rare).
  if (m_.jitter_ms > 0 && src != dst) {
    std::normal_distribution<double> n(static_cast<double>(d), m_.jitter_ms * 1000.0);
    d = static_cast<TimeUs>(std::llround(std::max(0.0, n(rng))));
  }
  return std::max(now + d, last);  // per-channel FIFO, as one TCP connection would deliver
}

TimeUs LinkChannels::due(const Deployment& d, NodeId from, NodeId to, TimeUs now, std::mt19937_64& rng) {
  TimeUs& last = last_[(uint64_t{from} << 32) | to];
  last = emu_.delivery_time(d.node(from).region, d.node(to).region, now, last, rng);
  return last;
}

}  // namespace txn
