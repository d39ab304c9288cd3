// TAPIR (SOSP'15) on one-shot transactions: a read round at one replica per
// shard, optimistic validation at Prepare (an inconsistent-replication
// consensus operation: fast on 3 identical results, else decided on a
// majority and finalized), Commit/Abort as inconsistent operations, retries
// with a fresh attempt (docs/protocols/tapir.md).
#pragma once
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/handler_driver.h"
#include "deadline_timer.h"
#include "epochs.h"
#include "id_set.h"
#include "suspects.h"
#include "protocol.h"
#include "role.h"
#include "self_queue.h"
#include "shards.h"

namespace txn::tapir {

using TxnId = uint64_t;

struct Options {
  explicit Options(const Deployment& d);
  bool fast_path;  // decide a shard on 3 identical Prepare results; false: always finalize
  TimeUs prepare_timeout_us;  // then a shard is decided on the results of a majority (IR's consensus timeout)
  bool suspect_on_timeout;    // a replica that let a Prepare time out is not waited for until it is heard from
  TimeUs read_timeout_us;     // a Read unanswered by then goes to the shard's other replicas
};

// The conflict keys of `t`'s pieces at `shard`: those they write, and those they only read.
void conflict_keys(const TxnRequest& t, uint32_t shard, std::set<std::string>* reads, std::set<std::string>* writes);
// Replica `me`'s answer to a Prepare of `id`: its result, in its epoch, and with OK the dependencies it names.
Envelope prepare_reply(const NodeInfo& me, TxnId id, ::tapir::Result result, uint64_t epoch,
                       const std::vector<TxnId>& deps);
// A sealed record's parts (Site::seal, Voter::seal): every key's version that anything set (a map of key -> a state
// with writer, accessor and readers), and one transaction's hold of its keys.
template <class KeyStates>
void record_versions(const KeyStates& keys, ::tapir::Record* rec) {
  for (const auto& [key, ks] : keys) {
    if (!ks.writer && !ks.accessor && ks.readers.empty()) continue;
    ::tapir::KeyVersion* k = rec->add_keys();
    k->set_key(key);
    k->set_writer(ks.writer);
    k->set_accessor(ks.accessor);
    for (TxnId x : ks.readers) k->add_readers(x);
  }
}
void record_hold(TxnId id, const std::set<std::string>& reads, const std::set<std::string>& writes,
                 ::tapir::Record* rec);

// A TAPIR replica plays two roles, each a class of its own (src/core/role.h): every replica is a Site (it answers
// reads, validates and holds Prepares, applies commits in dependency order); replica 0 of a shard is also the
// Coordinator of the transactions homed there (reads, Prepare, Finalize on the slow path, Commit or Abort, the
// reply).

// The replica role of one shard.
class Site : public RoleContext {
 public:
  Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_read(Env& env, NodeId from, const ::tapir::Read& m);
  void on_prepare(Env& env, NodeId from, ::tapir::Prepare& m);
  void on_finalize(Env& env, NodeId from, const ::tapir::Finalize& m);
  void on_commit(Env& env, const ::tapir::Commit& m);
  void on_abort(const ::tapir::Abort& m);
  void on_still_held(Env& env, NodeId from, const ::tapir::StillHeld& m);
  bool idle() const { return locals_.empty(); }
  void add_counters(std::map<std::string, int64_t>& c) const;
  const ShardExecutor& executor() const { return exec_; }
  // A restarted peer's rejoin (ReplicaNode::seal): the epoch its results carry, and its record.
  uint64_t epoch() const { return epoch_; }
  void seal(uint64_t epoch, std::string* record);

 private:
  // A transaction of this shard from its Prepare to its Commit (applied) or Abort, in one of three phases
  // (set_phase checks the transitions: Refused -> Prepared -> Committed, or Refused -> Committed):
  //   Refused    its Prepare was answered ABSTAIN or ABORT here: it holds nothing
  //   Prepared   answered OK (or Finalized OK): it holds its keys against conflicting Prepares
  //   Committed  waits, still holding, until its dependencies are applied here; then applied and erased
  enum class Phase { Refused, Prepared, Committed };
  struct Local {
    TxnRequest txn;
    std::set<std::string> reads, writes;  // this shard's conflict keys (a key both read and written: in writes)
    Phase phase = Phase::Refused;
    std::vector<TxnId> deps;
    Vars vars;
    ::tapir::Result result = ::tapir::OK;   // its Prepare's result here (asked again: the same)
    std::vector<TxnId> ok_deps;             // with OK: the dependencies it named
  };
  struct KeyState {
    TxnId writer = 0;                 // last applied transaction that wrote the key
    TxnId accessor = 0;               // last applied transaction that read or wrote it
    std::vector<TxnId> readers;       // applied since that write, reading it
    std::set<TxnId> holders;          // prepared, or committed and not applied, accessing it
  };
  std::map<std::string, uint64_t> versions_of(const TxnRequest& t) const;
  static void set_phase(TxnId id, Local& l, Phase to);
  bool conflicts(const Local& a, const Local& b) const;
  void hold(TxnId id, Local& l);
  void release(TxnId id, const Local& l);
  void try_apply(Env& env);

  ShardExecutor exec_;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<TxnId, Local> locals_;
  IdSet applied_;            // transactions of this shard applied here
  std::set<TxnId> waiting_;  // committed, not applied
  uint64_t epoch_ = 0;       // raised by a restarted peer's Seal: its results carry it
  int64_t n_again_ = 0;
  void reply_prepare(Env& env, NodeId to, TxnId id, const Local& l);
};

// The coordinator role (replica 0 of a shard): one Coord per transaction homed there, until the reply.
class Coordinator : public RoleContext {
 public:
  Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_submit(Env& env, NodeId from, ClientSubmit& m);
  void on_read_reply(Env& env, NodeId from, const ::tapir::ReadReply& m);
  void on_prepare_reply(Env& env, const ::tapir::PrepareReply& m);
  void on_finalize_reply(Env& env, const ::tapir::FinalizeReply& m);
  void on_timer(Env& env, uint64_t id);
  bool idle() const { return coords_.empty(); }
  static constexpr uint64_t kPrepareTimer = 1;
  static constexpr uint64_t kReadTimer = 2;
  void add_counters(std::map<std::string, int64_t>& c) const;

 private:
  // A transaction's phase at its coordinator (set_phase checks the transition): Reading (each shard read once
  // the values its pieces need are known) --every shard read--> Preparing (each shard decided: OK on 3 identical
  // results or a finalized majority, else aborted); then committed or aborted, the Coord is erased.
  enum class Phase { Reading, Preparing };
  struct Coord {
    TxnRequest txn;
    NodeId client = 0;
    std::vector<uint32_t> shards;
    Phase phase = Phase::Reading;
    std::set<uint32_t> read_sent, read_done;
    std::map<uint32_t, uint32_t> read_from;   // shard -> the replica its Read went to first
    std::set<uint32_t> read_again;   // shards whose Read went to their other replicas (the first had not answered)
    TimeUs read_deadline = 0;        // Reading: when the shards not read yet are asked of their other replicas
    std::map<uint32_t, std::map<std::string, uint64_t>> versions;  // shard -> read versions
    Vars vars;
    std::map<uint32_t, std::map<uint32_t, ::tapir::Result>> results;  // shard -> replica -> result
    std::map<uint32_t, ::tapir::Result> decided;                      // shard -> its decided result
    std::map<uint32_t, uint32_t> finalized;                           // shard -> replicas that confirmed (bit r)
    std::map<uint32_t, std::set<TxnId>> deps;  // shard -> the union of its OK replies' dependencies
    bool slow = false;
    TimeUs prepare_deadline = 0;  // Preparing: when the shards still undecided are decided on a majority's results
    bool timed_out = false;       // that time has passed
    std::map<uint32_t, RoundEpoch> epochs;   // shard -> its results' epochs: only the newest one's count
  };
  static void set_phase(Coord& c, Phase to);
  void send_reads(Env& env, Coord& c);
  void read(Env& env, const Coord& c, NodeId to);
  void reads_timed_out(Env& env);
  void decide_shard(Env& env, Coord& c, uint32_t shard);
  void maybe_finish(Env& env, Coord& c);
  bool fast(const Coord& c, uint32_t shard) const;   // the shard was decided on the fast path (3 OKs)
  void finish(Env& env, Coord& c, bool commit);
  void prepare(Env& env, Coord& c, uint32_t shard, NodeId to);   // (again)
  void again_if_short(Env& env, Coord& c);

  const Options& opts_;
  std::unordered_map<TxnId, Coord> coords_;
  DeadlineTimer prepare_timer_{kPrepareTimer};   // one timer for every Prepare round in flight
  DeadlineTimer read_timer_{kReadTimer};         // and one for every Read round
  // Replicas that let a Read time out: a shard's Read goes to its first replica not among them (replica 0 when
  // none is), until heard from (any reply).
  Suspects read_suspects_;
  int64_t n_reads_again_ = 0, n_read_replies_late_ = 0;
  int64_t n_fast_ = 0, n_slow_ = 0, n_abort_irt_ = 0, n_abort_crt_ = 0, n_stale_ = 0, n_conflict_ = 0;
  Suspects suspects_;   // replicas that let a Prepare round time out, until heard from (suspect_on_timeout)
  void heard(uint32_t shard, uint32_t replica);
  int64_t n_unwaited_ = 0;  // shards decided on a majority's results at once: only suspected replicas missing
  int64_t n_timeouts_ = 0;  // shards decided on a majority's results after the timeout (a replica had not answered)
  int64_t n_asked_again_ = 0;   // Prepares sent again (a result of an older epoch, a shard without a majority's)
};

// A restarted replica's votes (voter.cc): Site's validation, from the sealed records of its shard's other replicas
// (what they hold) and the versions of the state it follows (src/core/recovery.h).
class Voter : public txn::Voter {
 public:
  static constexpr TimeUs kAskUs = 1'000'000;   // a hold from a record unresolved this long: its recorder is asked
  Voter(const Deployment& d, NodeId self, const Workload& w);
  bool adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) override;
  void follow(const std::string& record) override;
  void on_message(Env& env, Envelope& m, ShardExecutor& state) override;
  void executed(uint64_t txn, const Piece& piece) override;
  bool seal(uint64_t epoch, std::string* record) override;
  std::map<std::string, int64_t> counters() const override;

 private:
  struct KeyState {
    TxnId writer = 0, accessor = 0;
    std::vector<TxnId> readers;
    std::set<TxnId> holders;
  };
  struct Held {   // a transaction holding keys here: voted OK here, or held by a record
    std::set<std::string> reads, writes;
    ::tapir::Result result = ::tapir::OK;   // its vote, when it voted on it
    std::vector<TxnId> deps;
    bool voted = false, holds = false, committed = false;
    NodeId recorder = 0;   // from a record: whose (asked whether it still holds it)
    TimeUs since = 0;
  };
  void flush();   // the transaction being applied (executed()) is done: its keys' versions
  void release(TxnId id);
  bool conflicts(const Held& a, const Held& b) const;
  void prepare(Env& env, NodeId from, ::tapir::Prepare& m, ShardExecutor& state);
  void reply(Env& env, NodeId to, TxnId id, const Held& h);
  void ask_recorders(Env& env);
  const Deployment& d_;
  const NodeInfo& me_;
  uint64_t epoch_ = 0;
  bool adopted_ = false;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<TxnId, Held> held_;
  IdSet applied_;                               // applied in the state it follows since it took that state over
  TxnId applying_ = 0;                          // executed(): the transaction whose pieces are being applied
  std::set<std::string> applying_reads_, applying_writes_;
  TimeUs asked_us_ = 0;
  int64_t n_votes_ = 0, n_again_ = 0, n_released_ = 0, n_asked_ = 0;
};

class Replica : public TwoRoleReplica<Options, Site, Coordinator> {
 public:
  using TwoRoleReplica::TwoRoleReplica;
  uint64_t epoch() const override { return site_.epoch(); }
  bool seal(uint64_t epoch, std::string* record) override {
    site_.seal(epoch, record);
    return true;
  }
  void on_timer(Env& env, uint64_t id) override {
    coord_.on_timer(env, id);
    self_q_.drain(env, [&](Envelope& m) { route(env, m); });
  }
  // Coordinator: fast_prepares / slow_prepares (committed transactions whose
  // every shard was decided on the fast path / some shard was finalized),
  // aborts_irt / aborts_crt (aborted attempts), aborts_stale (an ABORT result:
  // a stale read) and aborts_conflict (ABSTAIN: a conflicting transaction in
  // the way).

 private:
  void route(Env& env, Envelope& msg) override;
};

}  // namespace txn::tapir
