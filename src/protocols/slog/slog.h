// SLOG (VLDB'19) as the DAST artifact adapted it to the edge: no cross-region
// data replication, every shard homed in its region (docs/protocols/slog.md).
// A single-home transaction (IRT) is appended to its region's local log; a
// multi-home one (CRT) is ordered first by a global log replicated over three
// regions, then inserted into every involved region's local log in global
// order. Shards execute their region's log deterministically, Calvin style.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "client/handler_driver.h"
#include "protocol.h"
#include "role.h"
#include "self_queue.h"
#include "shards.h"

namespace txn::slog {

using TxnId = uint64_t;

constexpr const char* kOrderer = "orderer";        // per region: appends, batches and distributes the local log
constexpr const char* kLogBackup = "log_backup";   // per region: holds a copy of every batch before it is delivered
constexpr const char* kGlobalLog = "global_log";   // 3 members in 3 regions: member 0 leads, the others follow

// SLOG's options: `protocols: {slog: {...}}` (schema in spec()).
struct Options {
  explicit Options(const Deployment& d);
  double batch_interval_ms;  // local-log batches are cut on this period
  uint32_t pending_window;   // a shard considers at most this many unfinished log entries at a time
};

// A SLOG replica plays two roles, each a class of its own (src/core/role.h): every replica is a Site (it executes
// its shard's pieces in the order of its region's local log); replica 0 of a shard is also the Handler of the
// transactions homed there (it routes each to the local or the global log and answers the client).

// The replica role of one shard.
class Site : public RoleContext {
 public:
  Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_batch(Env& env, ::slog::Batch& m);
  void on_send_output(Env& env, const ::slog::SendOutput& m);
  bool idle() const { return log_.empty(); }
  const ShardExecutor& executor() const { return exec_; }
  void add_counters(std::map<std::string, int64_t>& c) const;

 private:
  // A log entry's phase at this replica (set_phase checks the transitions):
  //   Logged --an earlier unfinished entry conflicts with it, or it is beyond the window--> Blocked
  //   Logged or Blocked --within the window, no earlier unfinished entry conflicting--> Running
  //   Running --every piece here executed--> done
  // Logged: appended, not yet looked at. Done, the entry leaves the log. Nothing leaves Running but done: the
  // entries before a Running one only finish, so it stays within the window and free. Entering Blocked is what
  // blocked_entries counts (at replica 0), once per entry.
  enum class Phase { Logged, Blocked, Running };
  // A log entry with a piece on this shard, until every such piece has executed.
  struct Pending {
    TxnRequest txn;
    Phase phase = Phase::Logged;
    std::set<uint32_t> done;           // executed piece ids
    std::set<std::string> reads, writes;  // conflict keys of its pieces here
    OrderKey key;                      // its local-log position: (region, batch, index in the batch)
    bool multi_home = false;
  };
  static void set_phase(Pending& p, Phase to);
  void append(Env& env, ::slog::Entry& e, uint64_t batch, uint64_t index);
  void try_execute(Env& env);
  bool conflicts(const Pending& later, const Pending& earlier) const;
  bool run_pieces(Env& env, Pending& p);  // true once every piece here has executed
  void finished(Env& env, const Pending& p);

  const Options& opts_;
  ShardExecutor exec_;
  uint64_t next_batch_ = 1;
  std::map<uint64_t, ::slog::Batch> early_;      // batches that came before their predecessor
  std::deque<Pending> log_;                       // this shard's unfinished entries, in log order
  std::unordered_map<TxnId, Vars> vars_;          // values known per transaction (may precede its entry)
  int64_t n_batches_ = 0, n_batch_entries_ = 0, n_single_ = 0, n_multi_ = 0, single_wait_us_ = 0,
          multi_wait_us_ = 0, n_blocked_ = 0, n_window_full_ = 0;
};

// The handler role (replica 0 of a shard): one Coord per transaction homed there, from its routing to the reply.
class Handler : public RoleContext {
 public:
  Handler(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_submit(Env& env, NodeId from, ClientSubmit& m);
  void on_piece_result(Env& env, const ::slog::PieceResult& m);
  bool idle() const { return coords_.empty(); }
  void add_counters(std::map<std::string, int64_t>& c) const { c["global_entries"] = n_global_; }

 private:
  struct Coord {
    NodeId client = 0;
    std::vector<uint32_t> shards;
    std::set<uint32_t> results;
    Vars outputs;
    bool answered = false;  // the client has its reply (once every shard reported; see mutant.h)
  };
  std::unordered_map<TxnId, Coord> coords_;
  int64_t n_global_ = 0;
};

class Replica : public TwoRoleReplica<Options, Site, Handler> {
 public:
  using TwoRoleReplica::TwoRoleReplica;
  // Counted at replica 0 of every shard, per log entry with a piece there:
  // batches (non-empty for this shard) and batch_entries (their entries);
  // single_home_entries / multi_home_entries and *_log_wait_us (submission to
  // local-log position, summed); global_entries (multi-home transactions this
  // handler sent to the global log); blocked_entries (entries that waited for
  // an earlier conflicting one or beyond the window) and window_full_waits.

 private:
  void route(Env& env, Envelope& msg) override;
};

// The region's local log: single-home entries from the region's handlers and
// multi-home ones from the global log (in global order, skips included) are
// appended as they come, cut into a batch every batch_interval_ms, copied to
// the backup, and then delivered to every replica of every shard of the region.
class Orderer : public Node {
 public:
  Orderer(const Deployment& d, NodeId self);
  void start(Env&) override {}
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return open_.empty() && unacked_.empty() && early_.empty(); }

 private:
  void add(Env& env, ::slog::Entry e);
  void deliver(Env& env, uint64_t batch, const std::vector<::slog::Entry>& entries);

  const Deployment& d_;
  const NodeInfo& me_;
  const Options opts_;
  std::vector<::slog::Entry> open_;                       // entries of the batch being filled
  bool timer_armed_ = false;
  uint64_t last_batch_ = 0, delivered_ = 0;
  std::map<uint64_t, std::vector<::slog::Entry>> unacked_;  // cut, waiting for the backup's copy
  std::set<uint64_t> acked_;
  uint64_t next_global_ = 1;                              // the next global index to insert
  std::map<uint64_t, ::slog::Ordered> early_;             // global entries ahead of a gap
};

// Holds a copy of each batch of its region's local log (the in-region
// replication of the log: one copy besides the orderer's).
class LogBackup : public Node {
 public:
  LogBackup(const Deployment& d, NodeId self) : d_(d), me_(d.node(self)) {}
  void start(Env&) override {}
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env&, uint64_t) override {}
  uint64_t batches() const { return batches_; }

 private:
  const Deployment& d_;
  const NodeInfo& me_;
  uint64_t batches_ = 0;
};

// A member of the global log, a Raft-style log of multi-home transactions:
// member 0 is the leader; an entry is committed once one follower stores it
// (a majority of three) and is then sent, in index order, to every region's
// orderer (a skip to the regions it does not touch).
class GlobalMember : public Node {
 public:
  GlobalMember(const Deployment& d, NodeId self);
  void start(Env&) override {}
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env&, uint64_t) override {}
  bool idle() const override { return log_.empty(); }

 private:
  const Deployment& d_;
  NodeId self_;
  std::vector<NodeId> members_;
  bool leader_ = false;
  uint64_t last_ = 0, committed_ = 0;
  std::map<uint64_t, ::slog::Entry> log_;  // leader: not yet delivered; follower: stored (pruned as it goes)
};

ProtocolSpec spec();

}  // namespace txn::slog
