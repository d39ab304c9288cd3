// Janus (OSDI'16): dependency tracking on conflict keys, commit in one round
// trip when every replica agrees, execution in the order of the dependency
// graph's strongly connected components (docs/protocols/janus.md).
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
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

namespace txn::janus {

using TxnId = uint64_t;
using Scc = std::shared_ptr<const std::vector<TxnId>>;  // a decided component, ascending ids

// Janus's options: `protocols: {janus: {...}}` (schema in spec.cc).
struct Options {
  explicit Options(const Deployment& d);
  bool fast_path;  // commit on identical PreAccept replies; false: always take the Accept round
  TimeUs preaccept_timeout_us;  // then a shard is decided on a majority's PreAccept replies (slow path)
  bool suspect_on_timeout;      // a replica that let a round time out is not waited for until it is heard from
  TimeUs inquire_timeout_us;    // an Inquire unanswered by then is sent to the shard's other replicas
};

// A Janus replica plays two roles, each a class of its own (src/core/role.h): every replica is a Site (it orders
// its shard's transactions by their dependency graph and executes them); replica 0 of a shard is also the
// Coordinator of the transactions homed there (PreAccept, Accept when the replies differ, Commit, the reply).

// Shard sets, interned: what a replica keeps of a forgotten transaction's shards is an index (Site, Voter).
class ShardSets {
 public:
  // The index of `shards`, added if new; false when `max` sets are held already and it is not one of them.
  bool index(const std::vector<uint32_t>& shards, size_t max, size_t* out) {
    auto [s, fresh] = ids_.try_emplace(shards, sets_.size());
    if (fresh) {
      if (sets_.size() >= max) {
        ids_.erase(s);
        return false;
      }
      sets_.push_back(shards);
    }
    *out = s->second;
    return true;
  }
  const std::vector<uint32_t>& at(size_t i) const { return sets_[i]; }

 private:
  std::vector<std::vector<uint32_t>> sets_;
  std::map<std::vector<uint32_t>, size_t> ids_;
};

// The ordering and execution role.
class Site : public RoleContext {
 public:
  Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_pre_accept(Env& env, NodeId from, ::janus::PreAccept& m);
  void on_accept(Env& env, NodeId from, const ::janus::Accept& m);
  void on_commit(Env& env, const ::janus::Commit& m);
  void on_inquire(Env& env, NodeId from, const ::janus::Inquire& m);
  void on_inquire_reply(Env& env, const ::janus::InquireReply& m);
  void on_send_output(Env& env, const ::janus::SendOutput& m);
  void on_timer(Env& env, uint64_t id);
  static constexpr uint64_t kInquireTimer = 2;
  bool idle() const { return locals_.empty(); }
  const ShardExecutor& executor() const { return exec_; }
  void add_counters(std::map<std::string, int64_t>& c) const;
  // A restarted peer's rejoin (ReplicaNode::seal): the epoch its replies carry, and its record.
  uint64_t epoch() const { return epoch_; }
  void seal(uint64_t epoch, std::string* record);

 private:
  // A transaction's status at this replica (set_status checks the transitions):
  //   Unknown --its PreAccept--> PreAccepted --its Accept (slow path)--> Accepted --its Commit--> Committed
  //   PreAccepted --its Commit (fast path)--> Committed --every piece here executed--> Executed
  //   Unknown --an InquireReply (another shard's, asked about as an ancestor)--> Committed
  // Unknown: met only as a dependency so far. Only this shard's transactions are PreAccepted, Accepted or
  // Executed here; another shard's is Unknown until it is known to be committed.
  enum class Status { Unknown, PreAccepted, Accepted, Committed, Executed };
  // What this replica knows of a transaction: its own (it touches this shard)
  // or one met as a dependency.
  struct Vertex {
    Status status = Status::Unknown;
    std::vector<uint32_t> shards;  // empty: not known yet
    std::vector<TxnId> deps;       // final once Committed
    Scc scc;                       // decided component (global truth), or null
    bool local = false;            // touches this shard
    bool inquired = false;
  };
  struct KeyState;
  // A local transaction until it has executed here.
  struct Local {
    TxnRequest txn;
    NodeId coordinator = 0;
    std::set<uint32_t> done;  // executed piece ids
    uint64_t explored_at = 0; // graph version of its last walk (0: never walked)
    std::vector<KeyState*> write_keys, read_keys;   // its keys' states here (pending until it executes)
    std::vector<TxnId> pending;  // its PreAccept reply's pending ones (its deps are its vertex's until decided)
  };

  Vertex& vertex(TxnId id);
  static void set_status(TxnId id, Vertex& v, Status to);
  void learn(const ::janus::Dep& d);          // a dependency's shards and decided component
  void set_scc(const Scc& scc);               // held by every member
  void fill_dep(TxnId id, ::janus::Dep* out);  // as this replica knows it
  void answer_inquiries(Env& env, TxnId id);
  void try_execute(Env& env);
  void decide_sccs(Env& env, const std::vector<TxnId>& roots);  // walk their ancestors, decide what is final
  bool ready(TxnId t) const;
  bool run_pieces(Env& env, TxnId t, Local& l); // true when every piece here has executed
  void executed(Env& env, TxnId t);

  ShardExecutor exec_;
  // Per conflict key: the last transaction that wrote it and those that read it since.
  struct KeyState {
    TxnId writer = 0;
    std::vector<TxnId> readers;
    // Every transaction of this shard that accessed the key and has not executed here, in arrival order: a
    // decision on a majority's replies must hold each of them (the direct predecessors alone are enough only
    // when every replica's reply is heard; see replica.cc).
    std::vector<TxnId> pending_writers, pending_readers;
  };
  // The keys of t's pieces at this shard, each once: those it writes, and those it only reads.
  void keys_here(const TxnRequest& t, std::vector<const std::string*>* writes,
                 std::vector<const std::string*>* reads) const;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<TxnId, Vertex> graph_;
  std::unordered_map<TxnId, Local> locals_;
  std::set<TxnId> committed_;                          // committed local transactions not executed here
  std::unordered_map<TxnId, Vars> vars_;               // values known per transaction (may precede it)
  std::unordered_map<TxnId, std::vector<NodeId>> inquirers_;  // waiting for a transaction's commit here
  // Inquires sent to a shard's replica 0 and not answered yet: when the shard's other replicas are asked too (any
  // live replica answers; replica.cc, "Inquires"). Erased at the answer or at the deadline.
  struct Asked {
    TimeUs deadline = 0;
    uint32_t shard = 0;
  };
  std::unordered_map<TxnId, Asked> asked_;
  DeadlineTimer inquire_timer_{kInquireTimer};
  const Options& opts_;
  uint64_t version_ = 1;  // bumped whenever the graph gains a commit or a component (what a walk sees)
  uint64_t epoch_ = 0;    // raised by a restarted peer's Seal: its replies carry it
  int64_t n_inquiries_ = 0, n_inquiries_again_ = 0, largest_scc_ = 0, n_walk_visits_ = 0, n_again_ = 0, n_forgotten_ = 0;
  // Forgotten transactions (replica.cc, "What a replica forgets"): decided, and every member of their component that
  // touches this shard executed here. No vertex: each is a cut wherever met. What fill_dep says of one is kept: its
  // shards and its component, as `1 + index` in shard_sets_ (a byte per transaction of the deployment: an IdMap
  // spans every id of a client) and, for a component of several members, kMulti and its entry in multi_.
  static constexpr uint8_t kMulti = 0xff;
  struct Forgotten {
    uint8_t shards;    // index in shard_sets_
    Scc scc;           // shared by the members
  };
  IdMap<uint8_t> forgotten_;
  ShardSets shard_sets_;   // at most kMulti - 1
  std::unordered_map<TxnId, Forgotten> multi_;
  std::vector<TxnId> to_forget_;   // candidates (a component decided, a transaction executed)
  bool forgotten(TxnId id) const { return forgotten_.get(id) != 0; }
  void forget_settled();           // the candidates that may be forgotten now are
  void reply_pre_accept(Env& env, NodeId to, TxnId id, const std::vector<TxnId>& deps,
                        const std::vector<TxnId>& pending);
};

// The coordinator role (replica 0 of a shard): one Coord per transaction homed there, until the reply.
class Coordinator : public RoleContext {
 public:
  Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_submit(Env& env, NodeId from, ClientSubmit& m);
  void on_pre_accept_reply(Env& env, const ::janus::PreAcceptReply& m);
  void on_accept_reply(Env& env, const ::janus::AcceptReply& m);
  void on_piece_result(Env& env, const ::janus::PieceResult& m);
  void on_timer(Env& env, uint64_t id);
  bool idle() const { return coords_.empty(); }
  void add_counters(std::map<std::string, int64_t>& c) const;
  static constexpr uint64_t kPreAcceptTimer = 1;

 private:
  // A transaction's phase at its coordinator (set_phase checks the transitions):
  //   PreAccepting --every replica of every shard replied, the same deps per shard (fast path)--> Committed
  //   PreAccepting --the replies differ (or fast_path off), or the timeout passed with a majority of every shard's
  //                  replies in--> Accepting --a majority of every shard--> Committed
  // Committed, the outputs are collected; answered, the Coord is erased.
  enum class Phase { PreAccepting, Accepting, Committed };
  struct Coord {
    uint64_t txn_id = 0;
    NodeId client = 0;
    std::vector<uint32_t> shards;
    Phase phase = Phase::PreAccepting;
    TxnRequest txn;                           // kept to ask a replica again (a reply of an older epoch, a timeout)
    std::map<uint32_t, RoundEpoch> epochs;    // shard -> its replies' epochs: only the newest one's count
    std::map<uint32_t, std::map<uint32_t, std::vector<::janus::Dep>>> replies;  // shard -> replica -> deps
    std::map<uint32_t, std::map<uint32_t, std::vector<::janus::Dep>>> pending;  // ... -> its pending ones
    TimeUs deadline = 0;     // PreAccept timeout: then a majority's replies per shard decide (slow path)
    bool timed_out = false;
    std::map<uint32_t, uint32_t> accept_oks;   // shard -> the replicas whose AcceptOK came (bit i: replica i)
    std::vector<::janus::Dep> deps;  // the union of the replies: committed (fast) or accepted (slow)
    std::map<uint32_t, uint32_t> stored;   // committed: shard -> the replicas the decision rests on (the reply's)
    std::set<uint32_t> results;  // shards whose output replica reported
    Vars outputs;
    bool answered = false;       // the client has its reply (once every shard reported; see mutant.h)
  };
  static void set_phase(Coord& c, Phase to);
  void maybe_decide(Env& env, Coord& c);
  void commit(Env& env, Coord& c);
  void heard(uint32_t shard, uint32_t replica);
  void pre_accept(Env& env, const Coord& c, NodeId to);   // (again)

  const Options& opts_;
  Suspects suspects_;   // replicas that let a PreAccept round time out, until heard from (suspect_on_timeout)
  std::unordered_map<TxnId, Coord> coords_;
  DeadlineTimer preaccept_timer_{kPreAcceptTimer};   // one timer for every PreAccept round in flight
  int64_t n_fast_ = 0, n_slow_ = 0, n_timeouts_ = 0, n_unwaited_ = 0, n_asked_again_ = 0;
};

// A restarted replica's votes (voter.cc): Site's ordering half, rebuilt from the sealed records of its shard's other
// replicas, while its state follows one of them (src/core/recovery.h).
class Voter : public txn::Voter {
 public:
  Voter(const Deployment& d, NodeId self, const Workload& w);
  bool adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) override;
  void on_message(Env& env, Envelope& m, ShardExecutor& state) override;
  void executed(uint64_t txn, const Piece& piece) override;
  bool seal(uint64_t epoch, std::string* record) override;
  std::map<std::string, int64_t> counters() const override;

 private:
  struct Key {   // a conflict key: its chain's last accesses here (after a merge, of either record) and the pending
    std::vector<TxnId> writers, readers;
    std::set<TxnId> pending_w, pending_r;
  };
  struct Known {   // a transaction it voted for, or met in a record or a decision
    std::vector<uint32_t> shards;
    std::vector<TxnId> scc;
    uint32_t pieces_here = 0, executed = 0;
    std::vector<std::string> keys;   // where it is pending here, until it executed here
    bool voted = false, done = false;
    std::vector<TxnId> deps, pending;   // its vote
  };
  void keys_here(const TxnRequest& t, std::vector<std::string>* writes, std::vector<std::string>* reads) const;
  void pre_accept(Env& env, NodeId from, const TxnRequest& t, ShardExecutor& state);
  void reply(Env& env, NodeId to, TxnId id, const Known& k);
  void fill_dep(TxnId id, ::janus::Dep* out) const;
  void no_longer_pending(TxnId t, Known& k);
  // A transaction it no longer votes on or waits for, known only for what fill_dep says of it (its shards, its
  // component if that is itself alone), is kept in `settled_` in two bytes: 1 + (shard set's index << 1 | component
  // known). Site's forgetting (replica.cc, "What a replica forgets"), for a replica that holds no graph.
  Known& known(TxnId id);      // its entry, brought back from settled_ if it was there
  void settle(TxnId id);       // moved to settled_ if nothing but fill_dep's answer is left of it
  IdMap<uint16_t> settled_;
  ShardSets shard_sets_;   // at most 0x7ffe
  const Deployment& d_;
  const NodeInfo& me_;
  uint64_t epoch_ = 0;
  bool adopted_ = false;
  std::unordered_map<std::string, Key> keys_;
  std::unordered_map<TxnId, Known> known_;
  IdSet executed_;                       // transactions its state executed a piece of
  int64_t n_votes_ = 0, n_again_ = 0, n_accepts_ = 0;
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
    site_.on_timer(env, id);
    self_q_.drain(env, [&](Envelope& m) { route(env, m); });
  }
  // fast_commits / slow_commits (coordinator), preaccept_timeouts (transactions decided on a majority's replies
  // after the timeout), inquiries (sent), inquiries_again (sent again to a shard's other replicas), largest_scc_max
  // (the largest component decided here; summed as a maximum over the run), walk_visits (transactions looked at
  // by the walks that decide components: the graph work, which must not grow per commit with the run).

 private:
  void route(Env& env, Envelope& msg) override;
};

}  // namespace txn::janus
