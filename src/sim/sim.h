// Deterministic simulated network: runs Nodes in virtual time with the
// deployment's link delays and cross-region jitter (the transport's LinkEmulator),
// optional random extra delay per message (which reorders messages across
// channels) and optional per-node clock skew. Every
// channel (sender, receiver) stays FIFO, as a gRPC stream is.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "config.h"
#include "core/link_emulator.h"
#include "node.h"

namespace txn::sim {

struct Options {
  uint64_t seed = 1;
  TimeUs extra_delay_us = 0;             // uniform [0, extra] added to every message
  std::map<NodeId, TimeUs> clock_skew_us; // added to a node's now_us()
  // Virtual time of load start, t = 0 of the deployment's fault plan (d.faults, docs/nemesis.md): partitions,
  // spikes, jitter and clock faults apply from it as a real process applies them (pauses are the runner's).
  TimeUs load_start_us = 0;
  // Real link delays (and jitter) when they should differ from what the deployment
  // says (tests that estimates come from measurement, not from configuration).
  std::optional<LinkModel> actual_link;
  // Called for every message sent (tools that count traffic, e.g. txn-sim).
  std::function<void(NodeId from, NodeId to, const Envelope& msg)> tap;
  // A message it returns true for is lost on the way (not counted in dropped(): the test counts what it loses): a
  // peer that never answers one kind of message, as a crashed or restarted one does not (tests of who else is asked).
  std::function<bool(NodeId from, NodeId to, const Envelope& msg)> lose;
  // Called for every message and timer as it is handed to a simulated node, at its virtual time (tools that count
  // when the nodes run, e.g. txn-sim's wake-ups).
  std::function<void(NodeId node, TimeUs at, bool timer)> on_event;
};

class Network {
 public:
  Network(const Deployment& d, Options o = {});
  ~Network();
  void add(NodeId id, std::unique_ptr<Node> node);
  // Put `node` where node `id` ran and start it now: a crash (the old node, its memory and its timers are gone:
  // a timer it set fires on the new node, which ignores ids it did not set) and a restart.
  void replace(NodeId id, std::unique_ptr<Node> node);
  Node* node(NodeId id) { return nodes_.at(id).get(); }
  void start();
  TimeUs now() const { return now_; }
  // Process events until virtual time `t`.
  void run_until(TimeUs t);
  // Process events while `pred()` is false; false if `limit` was reached first.
  bool run_until(const std::function<bool()>& pred, TimeUs limit);
  // Inject a message as if `from` had sent it now.
  void send(NodeId from, NodeId to, Envelope msg);
  uint64_t delivered() const { return delivered_; }
  // Messages addressed to a node that is not simulated (lost, as to a dead peer).
  uint64_t dropped() const { return dropped_; }
  const std::vector<std::string>& logs() const { return logs_; }

 private:
  class SimEnv;
  struct Event {
    NodeId node;
    bool is_timer;
    uint64_t timer;
    Envelope msg;
  };
  bool step();
  void push(TimeUs at, Event ev);

  const Deployment& d_;
  Options o_;
  std::mt19937_64 rng_;
  FaultAnchor load_start_;
  LinkChannels channels_;
  std::map<NodeId, std::unique_ptr<Node>> nodes_;
  std::map<NodeId, std::unique_ptr<SimEnv>> envs_;
  std::map<std::pair<TimeUs, uint64_t>, Event> events_;
  uint64_t seq_ = 0;
  uint64_t delivered_ = 0;
  uint64_t dropped_ = 0;
  TimeUs now_ = 0;
  std::vector<std::string> logs_;
};

}  // namespace txn::sim
