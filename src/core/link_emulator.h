// Application-level link emulation: when a message sent now on one channel
// (source region -> destination region) becomes deliverable. Pure; the
// transport keeps one `last` per channel so each channel stays FIFO.
#pragma once
#include <random>
#include <unordered_map>

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

// The channels of one receiving side (a transport, an event loop, the simulator): one FIFO channel per (sender,
// receiver) node pair, each message due at the emulator's time for the two nodes' regions. Not thread-safe.
class LinkChannels {
 public:
  explicit LinkChannels(LinkModel m) : emu_(std::move(m)) {}
  // When a message from `from` to `to`, sent (or arrived) at `now`, is due; advances the channel.
  TimeUs due(const Deployment& d, NodeId from, NodeId to, TimeUs now, std::mt19937_64& rng);

 private:
  LinkEmulator emu_;
  std::unordered_map<uint64_t, TimeUs> last_;   // (from << 32 | to) -> last due time
};

}  // namespace txn
