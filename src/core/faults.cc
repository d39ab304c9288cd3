#include "core/faults.h"

#include "core/config.h"

#include <algorithm>
#include <cmath>

namespace txn {

bool PartitionFault::cuts(uint32_t a, uint32_t b) const {
  const bool ia = std::find(regions.begin(), regions.end(), a) != regions.end();
  const bool ib = std::find(regions.begin(), regions.end(), b) != regions.end();
  return ia != ib;
}

bool LinkFault::covers(uint32_t a, uint32_t b) const {
  return std::find(links.begin(), links.end(), RegionLink{a, b}) != links.end();
}

bool LinkFault::covers(uint32_t a, uint32_t b, NodeId to) const {
  return covers(a, b) && (to_ids.empty() || std::find(to_ids.begin(), to_ids.end(), to) != to_ids.end());
}

bool LinkFault::shares_link_with(const LinkFault& o) const {
  const bool nodes_meet = to_ids.empty() || o.to_ids.empty() ||
                          std::any_of(to_ids.begin(), to_ids.end(), [&](NodeId n) {
                            return std::find(o.to_ids.begin(), o.to_ids.end(), n) != o.to_ids.end();
                          });
  return nodes_meet && std::any_of(links.begin(), links.end(), [&](const RegionLink& l) {
           return o.covers(l.first, l.second);
         });
}

TimeUs FaultPlan::clock_shift(NodeId id, TimeUs t) const {
  for (const auto& c : clocks) {
    if (t < c.start_us || t >= c.end_us) continue;
    if (std::find(c.ids.begin(), c.ids.end(), id) == c.ids.end()) continue;
    return c.offset_us + static_cast<TimeUs>(std::llround(c.drift_ppm * static_cast<double>(t - c.start_us) / 1e6));
  }
  return 0;
}

TimeUs FaultPlan::release_time(uint32_t a, uint32_t b, TimeUs t, TimeUs one_way) const {
  // A message is held by a cut that is open when it leaves, or that opens while it is in flight; held, it leaves
  // at the heal, where a later cut may hold it again (the loader refuses overlapping partitions, not adjacent ones).
  for (bool moved = true; moved;) {
    moved = false;
    for (const auto& p : partitions) {
      if (!p.cuts(a, b) || p.w.end_us == kNoTime) continue;
      const bool open_at_send = p.w.contains(t), opens_in_flight = t < p.w.start_us && t + one_way > p.w.start_us;
      if (open_at_send || opens_in_flight) {
        t = p.w.end_us;
        moved = true;
      }
    }
  }
  return t;
}

TimeUs FaultPlan::extra_delay(uint32_t a, uint32_t b, NodeId to, TimeUs t, std::mt19937_64& rng) const {
  TimeUs extra = 0;
  for (const auto& f : links) {
    if (!f.w.contains(t) || !f.covers(a, b, to)) continue;
    if (f.kind == LinkFault::Kind::Spike) extra += f.amount_us;
    else extra += std::uniform_int_distribution<TimeUs>(0, f.amount_us)(rng);
  }
  return extra;
}

}  // namespace txn
