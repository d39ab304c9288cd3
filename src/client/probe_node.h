// RTT self-test node (`txn-client --probe N`): measures the round trip to one
// replica of every region through the same transport (and link emulation) the
// protocols use. A first warm-up probe per target opens the connections in both
// directions (not measured); once every target answered it (or after the
// warm-up timeout), N probes go out every `interval` to each target in
// parallel. The transport of the target answers them without its protocol.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/node.h"

namespace txn {

class ProbeNode final : public Node {
 public:
  // count probes per target, interval_us apart; give up on missing replies after timeout_us.
  ProbeNode(const Deployment& d, NodeId self, int count, TimeUs interval_us = 20000, TimeUs timeout_us = 10000000);
  void start(Env& env) override;
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env& env, uint64_t id) override;
  bool finished() const { return finished_; }
  // {"node": ..., "region": r, "targets": {"<region>": "<node>"}, "rtt_ms": {"<region>": [..]}, "lost": {..}}
  std::string result_json() const;
  // The replica probed in region r: replica 0 of the first shard of r, in the own region a shard other than
  // the prober's own when there is one (so the path leaves the container).
  static NodeId target_in(const Deployment& d, NodeId self, uint32_t region);

 private:
  void send_round(Env& env, uint64_t seq);
  void begin_measuring(Env& env);
  const Deployment& d_;
  NodeId self_;
  int count_;
  TimeUs interval_us_, timeout_us_;
  std::vector<NodeId> targets_;          // index = region
  std::map<uint32_t, std::vector<double>> rtt_ms_;  // region -> samples
  int sent_rounds_ = 0;   // measured rounds sent (seq 1..count)
  int warm_ = 0;          // warm-up replies received (seq 0)
  bool measuring_ = false;
  int received_ = 0;
  bool finished_ = false;
};

}  // namespace txn
