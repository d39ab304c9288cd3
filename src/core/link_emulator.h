// Application-level link emulation: when a message sent now on one channel
// (source region -> destination region) becomes deliverable. Pure; the
// transport keeps one `last` per channel so each channel stays FIFO.
#pragma once
#include <random>

#include "core/config.h"

namespace txn {

class LinkEmulator {
 public:
  explicit LinkEmulator(LinkModel m) : m_(std::move(m)) {}
  // app: max(now + max(0, N(one_way, jitter)), last), jitter on cross-region pairs only; netem/none: now.
  TimeUs delivery_time(uint32_t src_region, uint32_t dst_region, TimeUs now, TimeUs last,
                       std::mt19937_64& rng) const;
  const LinkModel& model() const { return m_; }

 private:
  LinkModel m_;
};

}  // namespace txn
