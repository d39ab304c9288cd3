// A restarted replica's catch-up (docs/fault-tolerance.md, "Restart"; docs/nemesis.md `crash:NODE@S+T`).
//
// A replica whose process died (killed by the nemesis, `kill -9`, `docker kill`, anything) may be started again with
// nothing in memory (`txn-server --recover`): nothing tells it or its peers which replica that is or that it was
// planned. It asks every other replica of its shard for their state (Join); the first to answer is its source: its
// snapshot (the store, ShardStore::encode, and its history so far) is taken over, and from then on the source sends
// every piece it executes, with the variables it ran with and the order key it ran by, and the restarted replica
// executes them again in that order (execution is deterministic: the checker's replay relies on the same). So it
// ends in its source's state with its source's history, event by event. A source that goes silent (no Part, not even
// the heartbeat, for kSilentUs) is replaced by asking again: whichever live replica answers first. Nothing is kept
// for a restart that may never come: a replica copies what it executes only while a restarted one follows it (its
// executor's tap), so memory stays flat whatever the run's length.
//
// It rejoins as a learner: it takes no part in its protocol again (every protocol message to it is dropped and
// counted), because no protocol here has a rule yet for a replica that lost its votes to vote again (TAPIR's IR view
// change, Janus's and DAST's recovery are not in their authors' code, docs/fault-tolerance.md); since issue 49 no
// follower is needed for progress in any of them, so the shard goes on as with the follower down.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "executor.h"
#include "protocol.h"

namespace txn {

// Every replica as the engine builds it: the protocol's replica as it is, plus the catch-up it serves to restarted
// peers of its shard (Join -> a Part with its snapshot, then a Part with what it executed after every message or
// timer it handled, and a heartbeat Part every kBeatUs).
class CatchUpServer final : public ReplicaNode {
 public:
  static constexpr TimeUs kBeatUs = 100'000;       // a heartbeat to each follower this often, while it has any
  static constexpr TimeUs kForgetUs = 3'000'000;   // a follower not heard from (Ack) this long is dropped
  static constexpr uint64_t kTimer = 0x53'45'52'56'45ull;   // "SERVE": the only timer it sets
  explicit CatchUpServer(std::unique_ptr<ReplicaNode> inner);
  void start(Env& env) override { inner_->start(env); }
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return inner_->idle(); }
  const ShardExecutor& executor() const override { return inner_->executor(); }
  std::map<std::string, int64_t> counters() const override;
  ReplicaNode& inner() { return *inner_; }
  size_t followers() const { return followers_.size(); }

 private:
  struct Follower {
    uint64_t attempt = 0;
    TimeUs heard_us = 0;
  };
  ShardExecutor& exec() { return const_cast<ShardExecutor&>(inner_->executor()); }   // its own: it taps it
  void serve(Env& env, NodeId from, const recovery::Msg& m);
  void forward(Env& env, bool beat);
  std::unique_ptr<ReplicaNode> inner_;
  std::map<NodeId, Follower> followers_;
  const ShardExecutor* served_ = nullptr;   // the state its followers follow (a Learner may take over another)
  bool beating_ = false;
  TimeUs sent_us_ = 0;
  int64_t joins_ = 0, parts_ = 0, events_sent_ = 0, snapshot_bytes_ = 0, forgotten_ = 0;
};

// A replica restarted empty: takes over the state of whichever live replica of its shard answers its Join first and
// executes what that one executes after, to the end of the run. Idle once it has every event its source had executed
// when the source last said it was idle.
class Learner final : public ReplicaNode {
 public:
  static constexpr TimeUs kTickUs = 100'000;       // it acks its source and looks for silence this often
  static constexpr TimeUs kSilentUs = 1'000'000;   // a source (or a Join) unanswered this long is asked again
  static constexpr uint64_t kTimer = 0x52'45'43'4f'56ull;   // "RECOV": the only timer it sets
  Learner(const Deployment& d, NodeId self, const Workload& w);
  void start(Env& env) override;
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return source_ != kNone && source_idle_ && have_ == source_total_; }
  const ShardExecutor& executor() const override { return *exec_; }
  std::map<std::string, int64_t> counters() const override;
  bool caught_up() const { return caught_up_us_ >= 0; }
  uint64_t events() const { return have_; }
  NodeId source() const { return source_; }
  // Called once, when it first took over a source's state.
  void on_caught_up(std::function<void(Env&, uint64_t events, TimeUs after_us, NodeId source)> f) {
    on_caught_up_ = std::move(f);
  }

 private:
  static constexpr NodeId kNone = ~NodeId{0};
  void join(Env& env);
  void take_part(Env& env, NodeId from, const recovery::Part& p);
  const Deployment& d_;
  const NodeInfo& me_;
  const Workload& w_;
  std::unique_ptr<ShardExecutor> exec_;
  NodeId source_ = kNone;
  uint64_t attempt_ = 0, have_ = 0, source_total_ = 0;
  bool source_idle_ = false;
  TimeUs started_us_ = 0, heard_us_ = 0, caught_up_us_ = -1;
  int64_t ignored_ = 0, parts_ = 0, stale_ = 0, sources_ = 0, snapshot_events_ = 0;
  std::function<void(Env&, uint64_t, TimeUs, NodeId)> on_caught_up_;
};

// Replica `id` as the engine runs it: `r` serving its shard's restarted peers (a CatchUpServer around it).
std::unique_ptr<ReplicaNode> serve_catch_up(const Deployment& d, NodeId id, std::unique_ptr<ReplicaNode> r);

}  // namespace txn
