// A restarted replica's catch-up (docs/fault-tolerance.md, "Restart"; docs/nemesis.md `crash:NODE@S+T`).
//
// A replica whose process died (killed by the nemesis, `kill -9`, `docker kill`, anything) may be started again with
// nothing in memory (`txn-server --recover`): nothing tells it or its peers which replica that is or that it was
// planned. It asks every other replica of its shard for their state (Join); the first to answer is its source: its
// snapshot (the store, ShardStore::encode, and its history so far: the events still in its memory, and where in its
// history file the others are, which it then fetches a bounded chunk at a time) is taken over, and from then on the
// source sends
// every piece it executes, with the variables it ran with and the order key it ran by, and the restarted replica
// executes them again in that order (execution is deterministic: the checker's replay relies on the same). So it
// ends in its source's state with its source's history, event by event. A source that goes silent (no Part, not even
// the heartbeat, for kSilentUs) is replaced by asking again: whichever live replica answers first. Nothing is kept
// for a restart that may never come: a replica copies what it executes only while a restarted one follows it (its
// executor's tap), so memory stays flat whatever the run's length.
//
// It votes again where its protocol says how (a Voter, ProtocolSpec::make_voter): its votes are its own, cast in an
// epoch every other replica of its shard sealed (no vote of theirs cast before counts with one cast after, and their
// records tell it what those votes were), while its state follows its source's (docs/fault-tolerance.md, "Restart").
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
// timer it handled, and a heartbeat Part every kBeatUs; Fetch -> Written, a chunk of the snapshot's history from its
// file, at most kChunkBytes).
class CatchUpServer final : public ReplicaNode {
 public:
  static constexpr TimeUs kBeatUs = 100'000;       // a heartbeat to each follower this often, while it has any
  static constexpr TimeUs kForgetUs = 3'000'000;   // a follower not heard from (Ack) this long is dropped
  static constexpr TimeUs kGiveBackUs = 1'000'000;   // a snapshot sent or taken: freed memory handed back after
  static constexpr size_t kChunkBytes = 256 * 1024;  // a Fetch's answer: about this much of its history file's lines
  static constexpr uint64_t kTimer = 0x53'45'52'56'45ull;   // "SERVE": the only timer it sets
  explicit CatchUpServer(std::unique_ptr<ReplicaNode> inner);
  void start(Env& env) override { inner_->start(env); }
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return inner_->idle(); }
  const ShardExecutor& executor() const override { return inner_->executor(); }
  std::map<std::string, int64_t> counters() const override;
  uint64_t epoch() const override { return inner_->epoch(); }
  bool seal(uint64_t epoch, std::string* record) override { return inner_->seal(epoch, record); }
  ReplicaNode& inner() { return *inner_; }
  size_t followers() const { return followers_.size(); }

 private:
  struct Follower {
    uint64_t attempt = 0;
    TimeUs heard_us = 0;
    uint64_t sent = 0;   // events of its history this follower has had: its snapshot's and every Part's since
  };
  ShardExecutor& exec() { return const_cast<ShardExecutor&>(inner_->executor()); }   // its own: it taps it
  void serve(Env& env, NodeId from, const recovery::Msg& m);
  void forward(Env& env, bool beat);
  std::unique_ptr<ReplicaNode> inner_;
  std::map<NodeId, Follower> followers_;
  const ShardExecutor* served_ = nullptr;   // the state its followers follow (a Learner may take over another)
  bool beating_ = false;
  TimeUs sent_us_ = 0;
  TimeUs give_back_at_us_ = -1;   // a snapshot was sent: its memory handed back to the system then
  int64_t joins_ = 0, parts_ = 0, events_sent_ = 0, snapshot_bytes_ = 0, forgotten_ = 0, seals_ = 0, chunks_ = 0,
          chunk_bytes_ = 0;
};

// A replica restarted empty. Its state: it takes over the state of a live replica of its shard (among those that
// answer its Join within kChooseUs of the first, the one of the lowest index: replica 0 when it answers, the one no
// fault here takes down) and executes what that one executes after, to the end of the run. Idle once it has every
// event its source had executed when the source last said it was idle. Its votes, when its protocol has a Voter: once
// it holds a state and knows every other replica's epoch, it asks them all to seal (Seal: move to an epoch above every
// one it was told) and, with every record sealed in that epoch, votes in it (Voter::adopt); the protocol's messages
// go to the Voter from then on, and what it executes is told to it; those that came while it sealed are kept and
// handed to the Voter, in order, once it votes. Without a Voter every protocol message is dropped (counted): it takes
// no part in its protocol. A source that goes silent is replaced by asking
// again; its votes then stop until every other replica sealed again (a second failure in a shard of three).
class Learner final : public ReplicaNode {
 public:
  static constexpr TimeUs kTickUs = 100'000;       // it acks its source and looks for silence this often
  static constexpr TimeUs kSilentUs = 1'000'000;   // a source (or a Join, a Seal) unanswered this long is asked again
  static constexpr TimeUs kChooseUs = 200'000;     // after the first answer to a Join, the others are waited this long
  static constexpr uint64_t kTimer = 0x52'45'43'4f'56ull;   // "RECOV": the only timer it sets
  Learner(const Deployment& d, NodeId self, const Workload& w, std::unique_ptr<Voter> voter = nullptr);
  void start(Env& env) override;
  void on_message(Env& env, Envelope& m) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override {
    return source_ != kNone && source_idle_ && have_ == source_total_ && exec_->history_complete();
  }
  const ShardExecutor& executor() const override { return *exec_; }
  uint64_t epoch() const override { return voting_ ? seal_epoch_ : 0; }
  // A later restarted peer's Seal: once it votes, its Voter's record (and it moves to that epoch); before, none.
  bool seal(uint64_t epoch, std::string* record) override;
  std::map<std::string, int64_t> counters() const override;
  bool caught_up() const { return caught_up_us_ >= 0; }
  bool voting() const { return voting_; }
  uint64_t events() const { return have_; }
  NodeId source() const { return source_; }
  // Called once, when it first took over a source's state.
  void on_caught_up(std::function<void(Env&, uint64_t events, TimeUs after_us, NodeId source)> f) {
    on_caught_up_ = std::move(f);
  }
  // Called each time it starts voting (the epoch it votes in).
  void on_voting(std::function<void(Env&, uint64_t epoch, TimeUs after_us)> f) { on_voting_ = std::move(f); }

 private:
  static constexpr NodeId kNone = ~NodeId{0};
  void join(Env& env);
  void choose(Env& env);
  void take_part(Env& env, NodeId from, const recovery::Part& p);
  void seal(Env& env, uint64_t epoch);
  void take_sealed(Env& env, NodeId from, const recovery::Sealed& s);
  void fetch(Env& env);
  void take_written(Env& env, NodeId from, const recovery::Written& w);
  std::vector<NodeId> peers() const;
  const Deployment& d_;
  const NodeInfo& me_;
  const Workload& w_;
  std::unique_ptr<ShardExecutor> exec_;
  std::unique_ptr<Voter> voter_;
  NodeId source_ = kNone;
  uint64_t attempt_ = 0, have_ = 0, source_total_ = 0;
  bool source_idle_ = false;
  TimeUs started_us_ = 0, heard_us_ = 0, caught_up_us_ = -1, first_offer_us_ = -1;
  TimeUs give_back_at_us_ = -1;   // a snapshot was taken over: its memory handed back to the system then
  std::map<NodeId, std::vector<recovery::Part>> offers_;   // answers to this Join (a snapshot, then Parts), by peer
  std::map<NodeId, uint64_t> epochs_;                       // each peer's epoch, as its answer said
  // sealing: the epoch asked for, and each peer's answer
  bool voting_ = false;
  uint64_t seal_attempt_ = 0, seal_epoch_ = 0;
  TimeUs seal_sent_us_ = -1;
  std::map<NodeId, recovery::Sealed> sealed_;
  // its source's history file's bytes still to fetch (the snapshot's written events): from fetch_at_ to fetch_end_
  uint64_t fetch_at_ = 0, fetch_end_ = 0;
  TimeUs fetch_sent_us_ = -1;
  int64_t fetched_bytes_ = 0, fetches_ = 0;
  static constexpr size_t kHeldMax = 20'000;   // protocol messages kept for its Voter until it votes (more: dropped)
  std::vector<Envelope> held_;
  int64_t ignored_ = 0, parts_ = 0, stale_ = 0, sources_ = 0, snapshot_events_ = 0, seals_ = 0, voted_ = 0;
  std::function<void(Env&, uint64_t, TimeUs, NodeId)> on_caught_up_;
  std::function<void(Env&, uint64_t, TimeUs)> on_voting_;
};

// Replica `id` as the engine runs it: `r` serving its shard's restarted peers (a CatchUpServer around it).
std::unique_ptr<ReplicaNode> serve_catch_up(const Deployment& d, NodeId id, std::unique_ptr<ReplicaNode> r);

}  // namespace txn
