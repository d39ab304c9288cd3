// The nemesis's plan as the engine sees it (docs/nemesis.md): the deployment's `faults` list, parsed and validated
// by config.cc. Times are relative to the start of the clients' load (t = 0); each process learns where t = 0 lies
// on its own clocks when the runner says go (FaultAnchor) and applies the engine-side kinds itself:
//   partition  messages crossing the cut around a set of regions are held while it is open and leave at the heal
//              (as if sent then: as TCP delivers after a partition heals), every channel still FIFO;
//   spike      +extra on chosen (source region, destination region) links, for messages sent in the window;
//              with `to_nodes`, only on messages to those nodes (a congested path into one replica);
//   jitter     + a uniform sample in [0, jitter] on chosen links, every channel still FIFO;
//   clock      a node's protocol clock (Env::now_us) offset by offset_us and drifting by drift_ppm from start on
//              (to the end of the run, or to end_us, where it steps back to true time);
//              the monotonic clock (Env::mono_us, latency) is never touched;
// The runner's kinds (pause, crash and its restart: signals to a process, a new process) are not read here at all:
// the system under test learns of them only as a deployed system would, a peer going silent (its transport gives it
// up after runtime.connect_timeout_s and keeps trying it) or a restarted peer asking to catch up
// (src/core/recovery.h). config.cc skips their entries.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "node.h"

namespace txn {

struct Deployment;

constexpr TimeUs kNoTime = std::numeric_limits<TimeUs>::max();

struct FaultWindow {
  TimeUs start_us = 0;         // since load start
  TimeUs end_us = kNoTime;     // exclusive; kNoTime: for the rest of the run
  bool contains(TimeUs t) const { return t >= start_us && t < end_us; }
  bool overlaps(const FaultWindow& o) const { return start_us < o.end_us && o.start_us < end_us; }
};

struct PartitionFault {
  std::string id;
  std::vector<uint32_t> regions;   // one side of the cut; every other region is on the other
  FaultWindow w;
  bool cuts(uint32_t a, uint32_t b) const;   // a and b on different sides
};

using RegionLink = std::pair<uint32_t, uint32_t>;   // (source region, destination region)

struct LinkFault {
  enum class Kind { Spike, Jitter };
  std::string id;
  Kind kind = Kind::Spike;
  std::vector<RegionLink> links;   // directed
  TimeUs amount_us = 0;            // spike: the extra delay; jitter: the upper bound of the uniform extra delay
  FaultWindow w;
  std::vector<std::string> to_nodes;   // by name, as the file has them; none: messages to any node of the links
  std::vector<NodeId> to_ids;          // resolved by the loader
  bool covers(uint32_t a, uint32_t b) const;               // the region link a -> b is one of this fault's
  bool covers(uint32_t a, uint32_t b, NodeId to) const;    // ... and a message on it to `to` is delayed
  bool shares_link_with(const LinkFault& o) const;         // some message would be delayed by both
};

struct ClockFault {
  std::string id;
  std::vector<std::string> nodes;  // by name, as the file has them
  std::vector<NodeId> ids;         // resolved by the loader
  TimeUs offset_us = 0;
  double drift_ppm = 0;
  TimeUs start_us = 0;             // from then on
  TimeUs end_us = kNoTime;         // to the end of the run, or until then (the clock steps back to true time)
};

struct FaultPlan {
  std::vector<PartitionFault> partitions;
  std::vector<LinkFault> links;
  std::vector<ClockFault> clocks;

  bool empty() const { return partitions.empty() && links.empty() && clocks.empty(); }
  bool delays_messages() const { return !partitions.empty() || !links.empty(); }
  bool engine_side() const { return delays_messages() || !clocks.empty(); }
  // What node `id`'s protocol clock adds to the true time `t` (since load start).
  TimeUs clock_shift(NodeId id, TimeUs t) const;
  // The time (since load start) a message that would leave at `t` on the link a -> b, whose base one-way delay is
  // `one_way`, leaves after partitions: t itself, or the heal of a cut that holds it (sent while it is open, or in
  // flight when it opens).
  TimeUs release_time(uint32_t a, uint32_t b, TimeUs t, TimeUs one_way) const;
  // The extra delay spikes and jitter add to a message to node `to` leaving at `t` (since load start) on a -> b.
  TimeUs extra_delay(uint32_t a, uint32_t b, NodeId to, TimeUs t, std::mt19937_64& rng) const;
};

// Where t = 0 (load start) lies on one clock of a process; unset (kNoTime) until the runner's go, and until then
// no fault applies. Set once, read from any thread.
class FaultAnchor {
 public:
  void set(TimeUs zero) { zero_.store(zero, std::memory_order_release); }
  TimeUs get() const { return zero_.load(std::memory_order_acquire); }
  bool known() const { return get() != kNoTime; }

 private:
  std::atomic<TimeUs> zero_{kNoTime};
};

}  // namespace txn
