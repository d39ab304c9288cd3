// Application-level link emulation: when a message sent now on one channel
// (source region -> destination region) becomes deliverable. Pure; the
// transport keeps one `last` per channel so each channel stays FIFO.
#pragma once
#include <random>
#include <unordered_map>

#include "core/config.h"
#include "core/faults.h"

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
//
// With a fault plan (core/faults.h) and its anchor (where load start lies on the clock `now` is read from), the
// message is first held by an open partition that cuts its link (it leaves at the heal), then delayed by the
// link model, then by the spikes and jitter of the time it leaves; the channel stays FIFO throughout. Before the
// anchor is known, or with an empty plan, only the link model applies.
class LinkChannels {
 public:
  explicit LinkChannels(LinkModel m) : emu_(std::move(m)) {}
  // The plan and anchor outlive the channels; either may be null (no faults).
  void set_faults(const FaultPlan* plan, const FaultAnchor* anchor) {
    plan_ = plan && plan->delays_messages() ? plan : nullptr;
    anchor_ = anchor;
  }
  // When a message from `from` to `to`, sent (or arrived) at `now`, is due; advances the channel.
  TimeUs due(const Deployment& d, NodeId from, NodeId to, TimeUs now, std::mt19937_64& rng);

 private:
  LinkEmulator emu_;
  const FaultPlan* plan_ = nullptr;
  const FaultAnchor* anchor_ = nullptr;
  std::unordered_map<uint64_t, TimeUs> last_;   // (from << 32 | to) -> last due time
};

}  // namespace txn
