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
#include "protocol.h"
#include "self_queue.h"
#include "shards.h"

namespace txn::tapir {

using TxnId = uint64_t;

struct Options {
  explicit Options(const Deployment& d);
  bool fast_path;  // decide a shard on 3 identical Prepare results; false: always finalize
};

class Replica : public ReplicaNode {
 public:
  Replica(const Deployment& d, NodeId self, const Workload& w);
  void start(Env&) override {}
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env&, uint64_t) override {}
  bool idle() const override;
  const ShardExecutor& executor() const override { return exec_; }
  // Coordinator: fast_prepares / slow_prepares (committed transactions whose
  // every shard was decided on the fast path / some shard was finalized),
  // aborts_irt / aborts_crt (aborted attempts), aborts_stale (an ABORT result:
  // a stale read) and aborts_conflict (ABSTAIN: a conflicting transaction in
  // the way).
  std::map<std::string, int64_t> counters() const override;

 private:
  // A transaction of this shard from its Prepare to its Commit (applied) or Abort.
  struct Local {
    TxnRequest txn;
    std::set<std::string> reads, writes;  // this shard's conflict keys (a key both read and written: in writes)
    bool prepared = false;                // holds its keys against conflicting Prepares
    bool committed = false;               // waits to be applied
    std::vector<TxnId> deps;
    Vars vars;
  };
  struct KeyState {
    TxnId writer = 0;                 // last applied transaction that wrote the key
    TxnId accessor = 0;               // last applied transaction that read or wrote it
    std::vector<TxnId> readers;       // applied since that write, reading it
    std::set<TxnId> holders;          // prepared, or committed and not applied, accessing it
  };
  struct Coord {
    TxnRequest txn;
    NodeId client = 0;
    std::vector<uint32_t> shards;
    std::set<uint32_t> read_sent, read_done;
    std::map<uint32_t, std::map<std::string, uint64_t>> versions;  // shard -> read versions
    Vars vars;
    bool preparing = false;
    std::map<uint32_t, std::map<uint32_t, ::tapir::Result>> results;  // shard -> replica -> result
    std::map<uint32_t, ::tapir::Result> decided;                      // shard -> its decided result
    std::map<uint32_t, uint32_t> finalized;                           // shard -> FinalizeReplies
    std::map<uint32_t, std::set<TxnId>> deps;  // shard -> the union of its OK replies' dependencies
    bool slow = false;
  };

  void dispatch(Env& env, Envelope& msg);
  void post(Env& env, NodeId to, Envelope msg);
  void drain_local(Env& env);

  void on_submit(Env& env, NodeId from, ClientSubmit& m);
  void send_reads(Env& env, Coord& c);
  void on_read(Env& env, NodeId from, const ::tapir::Read& m);
  void on_read_reply(Env& env, const ::tapir::ReadReply& m);
  void on_prepare(Env& env, NodeId from, ::tapir::Prepare& m);
  void on_prepare_reply(Env& env, const ::tapir::PrepareReply& m);
  void decide_shard(Env& env, Coord& c, uint32_t shard);
  void on_finalize(Env& env, NodeId from, const ::tapir::Finalize& m);
  void on_finalize_reply(Env& env, const ::tapir::FinalizeReply& m);
  void maybe_finish(Env& env, Coord& c);
  void finish(Env& env, Coord& c, bool commit);
  void on_commit(Env& env, const ::tapir::Commit& m);
  void on_abort(const ::tapir::Abort& m);

  std::map<std::string, uint64_t> versions_of(const TxnRequest& t) const;
  bool conflicts(const Local& a, const Local& b) const;
  void hold(TxnId id, Local& l);
  void release(TxnId id, const Local& l);
  void try_apply(Env& env);

  const Deployment& d_;
  NodeId self_;
  const NodeInfo& me_;
  const Workload& w_;
  const Options opts_;
  ShardExecutor exec_;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<TxnId, Local> locals_;
  std::set<TxnId> applied_;  // transactions of this shard applied here
  std::set<TxnId> waiting_;  // committed, not applied
  std::unordered_map<TxnId, Coord> coords_;
  SelfQueue self_q_;
  int64_t n_fast_ = 0, n_slow_ = 0, n_abort_irt_ = 0, n_abort_crt_ = 0, n_stale_ = 0, n_conflict_ = 0;
};

}  // namespace txn::tapir
