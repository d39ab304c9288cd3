// A coordinator's memory of the replicas that let one of its rounds time out (Janus's PreAccept timeout, TAPIR's
// Prepare timeout; docs/fault-tolerance.md, "Suspicion"). Until such a replica is heard from again, a round need
// not wait out the timeout for it: a shard whose missing replies all belong to suspected replicas is decided as if
// its round had timed out, on a majority's replies and by the protocol's slow path. Deciding on a majority by the
// slow path is safe at any moment (the timeout's length is a liveness choice), so this changes when, never what,
// a coordinator decides; in a run where no round times out it changes nothing.
#pragma once
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "node.h"

namespace txn {

class Suspects {
 public:
  void suspect(NodeId n) { set_.insert(n); }
  // Heard from (any reply): no longer suspected.
  void heard(NodeId n) { set_.erase(n); }
  bool suspected(NodeId n) const { return set_.count(n) > 0; }
  // Every replica of `replicas` (index i: replica i) whose bit in `answered` is clear is suspected, and at least one
  // bit is clear.
  bool only_suspects_missing(const std::vector<NodeId>& replicas, uint32_t answered) const {
    bool missing = false;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (answered & (1u << i)) continue;
      if (!suspected(replicas[i])) return false;
      missing = true;
    }
    return missing;
  }
  size_t size() const { return set_.size(); }

 private:
  std::unordered_set<NodeId> set_;
};

}  // namespace txn
