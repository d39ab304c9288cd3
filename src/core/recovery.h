// A restarted replica's catch-up (docs/fault-tolerance.md, "Restart"; docs/nemesis.md `crash:NODE@S+T`).
//
// A follower killed by the nemesis comes back as a new process with nothing in memory (`txn-server --recover`).
// It catches up by state transfer from replica 0 of its shard, protocol-neutrally: replica 0 keeps, from the start
// of the run, every piece it executed with the variables it ran with (ShardExecutor::retain), and the restarted
// replica asks for them in order and executes them again, by the same order keys, on a store loaded as every
// replica's is (execution is deterministic: the checker's replay relies on the same). Then it keeps asking, so
// that it stays caught up to the end of the run, and its final state and history are replica 0's.
//
// It rejoins as a learner: it takes no part in its protocol again (every protocol message to it is dropped and
// counted), because no protocol here has a rule for a replica that lost its votes to vote again (TAPIR's IR view
// change, Janus's and DAST's recovery are not in their authors' code, docs/fault-tolerance.md); since issue 49 no
// follower is needed for progress in any of them, so the shard goes on as with the follower down.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "executor.h"
#include "protocol.h"

namespace txn {

// Replica 0 of a shard whose follower may restart: the protocol's replica as it is, plus the catch-up it serves
// (Ask -> Part with at most kPartEvents events). Its executor retains from its construction on.
class CatchUpServer final : public ReplicaNode {
 public:
  static constexpr size_t kPartEvents = 256;
  explicit CatchUpServer(std::unique_ptr<ReplicaNode> inner);
  void start(Env& env) override { inner_->start(env); }
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override { inner_->on_timer(env, id); }
  bool idle() const override { return inner_->idle(); }
  const ShardExecutor& executor() const override { return inner_->executor(); }
  std::map<std::string, int64_t> counters() const override;
  ReplicaNode& inner() { return *inner_; }

 private:
  std::unique_ptr<ReplicaNode> inner_;
  int64_t parts_ = 0, events_sent_ = 0;
};

// A replica restarted empty: executes again what replica 0 of its shard executed, in its order, asking for it
// (Ask) until it has all of it and then every kPollUs, to the end of the run. Idle once it has everything replica
// 0 had executed when replica 0 last said it was idle.
class Learner final : public ReplicaNode {
 public:
  static constexpr TimeUs kPollUs = 20'000;        // caught up: ask again this often
  static constexpr TimeUs kResendUs = 1'000'000;   // an Ask unanswered this long is asked again
  static constexpr uint64_t kTimer = 0x52'45'43'4f'56ull;   // "RECOV": the only timer it sets
  Learner(const Deployment& d, NodeId self, const Workload& w);
  void start(Env& env) override;
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return caught_up_ && leader_idle_ && have_ == leader_total_; }
  const ShardExecutor& executor() const override { return exec_; }
  std::map<std::string, int64_t> counters() const override;
  bool caught_up() const { return caught_up_; }
  uint64_t events() const { return have_; }
  // Called once, when it first holds every event replica 0 had executed when it answered.
  void on_caught_up(std::function<void(Env&, uint64_t events, TimeUs after_us)> f) { on_caught_up_ = std::move(f); }

 private:
  void ask(Env& env);
  NodeId leader_;
  ShardExecutor exec_;
  uint64_t have_ = 0, leader_total_ = 0;
  bool leader_idle_ = false, caught_up_ = false, asking_ = false;
  TimeUs started_us_ = 0, asked_us_ = 0, caught_up_us_ = -1;
  int64_t ignored_ = 0, parts_ = 0, stale_ = 0;
  std::function<void(Env&, uint64_t, TimeUs)> on_caught_up_;
};

// Replica `id` as the run's restarts need it: replica 0 of a shard with a follower planned to restart
// (FaultPlan::may_restart) serves its catch-up (a CatchUpServer around it); any other replica as it is.
std::unique_ptr<ReplicaNode> serve_restarts(const Deployment& d, NodeId id, std::unique_ptr<ReplicaNode> r);

}  // namespace txn
