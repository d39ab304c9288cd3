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
  const uint32_t a = d.node(from).region, b = d.node(to).region;
  const TimeUs zero = plan_ && anchor_ ? anchor_->get() : kNoTime;
  if (zero == kNoTime) {
    last = emu_.delivery_time(a, b, now, last, rng);
    return last;
  }
  // Held by a partition, the message leaves at its heal; the link's delay, spikes and jitter count from then.
  const TimeUs leaves = plan_->release_time(a, b, now - zero, emu_.model().one_way_us(a, b)) + zero;
  const TimeUs at = emu_.delivery_time(a, b, leaves, 0, rng) + plan_->extra_delay(a, b, to, leaves - zero, rng);
  last = std::max(at, last);   // per-channel FIFO
  return last;
}

}  // namespace txn
