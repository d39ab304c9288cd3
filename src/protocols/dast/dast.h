// DAST: decentralized anticipate-and-stretch (docs/protocols/dast.md).
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/handler_driver.h"
#include "id_set.h"
#include "protocol.h"
#include "role.h"
#include "self_queue.h"
#include "protocols/dast/clock.h"

namespace txn::dast {

// The role of DAST's region manager: one per region (its nodes' `kind`).
constexpr const char* kManagerRole = "manager";

// DAST's options: `protocols: {dast: {...}}` in the deployment file (schema and
// defaults in spec.cc, docs/protocols/dast.md).
struct Options {
  explicit Options(const Deployment& d);
  double sync_interval_ms;        // safety net: a site re-checks its queue and clock requests this often
  double anticipation_margin_ms;  // added to the measured decision delay
  double ewma_alpha;              // smoothing of measured per-region delays
  double held_sample_factor;      // a delay sample above this x the estimate waits to be confirmed (0: never)
  // A piece that waits for a cross-region value but commutes with every other
  // piece (Workload::commutes) runs when the value arrives, after later
  // transactions, instead of holding its region's clocks below the CRT.
  bool defer_commutative;
};

// Static facts about a transaction's shape, derived from its pieces.
struct TxnShape {
  std::vector<uint32_t> shards;             // touched shards, ascending
  std::set<uint32_t> regions;               // touched regions
  // Regions that hold D pending until a cross-region input arrives: they have
  // a piece, not deferrable, whose input comes from another region.
  std::set<uint32_t> wait_regions;
  std::set<uint32_t> input_shards;          // shards with such a piece
};
// A piece that may run after its transaction's slot, when its inputs arrive:
// it commutes with every piece of the workload and produces nothing that other
// pieces need (and the defer_commutative option is on).
bool deferrable(const Options& o, const Workload& w, const Piece& p);
// Throws BadMessage for an unusable request (no pieces, bad shard, unknown
// input variable, or regions holding D that wait on each other's values).
// Without a workload (the manager needs only shards and regions) no piece is
// taken as deferrable.
TxnShape analyze(const Deployment& d, const Options& o, const TxnRequest& txn, const Workload* w);

// One record of the execution order, kept for tests (serializability check).
struct ExecRecord {
  Ts ts;
  TxnRequest txn;
};

// A DAST replica plays two roles, each a class of its own: every replica is a Site (it stores transactions in its
// shard's timestamp order and executes them); replica 0 of a shard is also its clients' Coordinator (it issues IRT
// timestamps, prepares and decides CRTs, answers the client). Replica, the node, owns both and routes each message
// to its role. What they share (the deployment, the options, the outgoing queue) is their Role base.
struct Role : RoleContext {
  Role(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  const Options& opts_;
  std::vector<NodeId> region_handlers_;  // other timestamp issuers (replica 0 of each shard)
};

// The executor role. At the shard's leader (replica 0): the shard's timestamp-ordered queue, the site's clock, and
// the region's clocks it knows; it executes by the safety rule (try_execute) and sends its followers what it
// executed, in its order (Executed). At a follower: it stores what it is sent (acks, proposals) and executes in the
// leader's order, with the leader's timestamps (a CRT's at its decision), each transaction once it has it; its own
// clock orders nothing. So a CRT is decided on its shards' leaders' proposals and a majority of each shard's copies
// (docs/protocols/dast.md, "A replica down"), and a slow, paused or crashed follower holds up nobody.
class Site : public Role {
 public:
  // A transaction's phase at this replica. The only transitions (set_phase checks them):
  //   Undecided --its decision (DistExe), rekeyed to it--> Queued       (a CRT; an IRT is Queued when stored)
  //   Queued --its slot: first in the queue, the region's watermark past its timestamp, every piece that cannot
  //            wait executed--> out of the queue: Deferred if a deferrable piece still waits for inputs, else done
  //   Deferred --the waiting pieces executed--> done
  // Done, the entry is erased.
  enum class Phase { Undecided, Queued, Deferred };

  Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q);
  void on_timer(Env& env, uint64_t id);
  void on_store_irt(Env& env, NodeId from, ::dast::StoreIRT& m);
  void on_store_crt(Env& env, NodeId from, ::dast::StoreCRT& m);
  void on_noti_crt(Env& env, const ::dast::NotiCRT& m);
  void on_dist_exe(Env& env, const ::dast::DistExe& m);
  void on_noti_commit(Env& env, const ::dast::NotiCommit& m);
  void on_send_output(Env& env, const ::dast::SendOutput& m);
  void on_sync(Env& env, NodeId from, const ::dast::IRSync& m);
  void on_clock_want(Env& env, NodeId from, const ::dast::ClockWant& m);
  void on_executed(Env& env, NodeId from, const ::dast::Executed& m);

  // For this replica's own coordinator: an IRT it timestamped, stored here as it is at the shard's other
  // replicas; the region's other handlers were asked to send their clocks past `ts` (ClockWant).
  void store_own_irt(TxnRequest&& txn, TxnShape shape, const Ts& ts);
  void clocks_requested(const Ts& ts);
  void observe(Env& env, NodeId from, const Ts& ts);
  void try_execute(Env& env);
  StretchClock& clock() { return clock_; }
  const StretchClock& clock() const { return clock_; }

  bool idle() const { return entries_.empty() && follow_.empty(); }
  bool leader() const { return me_.replica == 0; }
  const ShardExecutor& executor() const { return exec_; }
  std::map<std::string, int64_t> counters() const;
  const std::vector<ExecRecord>& exec_log() const { return exec_log_; }
  void keep_exec_log(bool on) { keep_log_ = on; }
  uint64_t executed() const { return n_executed_; }

 private:
  // Replica-side entry: a transaction ordered in this shard's queue.
  struct Entry {
    TxnRequest txn;
    TxnShape shape;
    Ts ts;
    Phase phase = Phase::Queued;
    NodeId coordinator = 0;
    uint32_t output_replica = 0;
    Vars vars;                      // known variables (received outputs + own outputs)
    std::set<uint32_t> done;        // executed piece ids
    bool holds_input_wait = false;  // D is pending here until inputs arrive
  };
  static void set_phase(Entry& e, Phase to);

  void serve_wants(Env& env);
  void wake_when_past(Env& env, const Ts& t);
  Entry& add_entry(TxnRequest&& txn, TxnShape shape, const Ts& ts, Phase phase,
                   NodeId coordinator, uint32_t output_replica);
  void rekey(Entry& e, const Ts& ts);
  // Every other timestamp issuer of the region is known to have a clock past t (pure predicates).
  bool handlers_past(const Ts& t) const;
  bool known_past(NodeId handler, const Ts& t) const;
  // Asks each handler not known to be past t for its clock, but not one whose answer covering t is already coming.
  void ask_clocks(Env& env, const Ts& t);
  bool run_pieces(Env& env, Entry& e);   // true when every local piece that cannot wait has executed
  bool local_pieces_done(const Entry& e) const;
  bool holding_input_missing(const Entry& e) const;
  void leave_slot(Env& env, Entry& e);
  void run_queue(Env& env);      // the leader: execute by the safety rule
  void follow(Env& env);         // a follower: execute in the leader's order
  void send_order(Env& env);     // the leader: tell the followers what it executed since the last time
  void complete(Env& env, Entry& e);
  void inputs_arrived(Env& env, Entry& e);

  ShardExecutor exec_;
  StretchClock clock_;
  std::unordered_map<NodeId, Ts> known_clock_;
  std::unordered_map<NodeId, std::set<Ts>> wanted_; // peers waiting for my clock to pass these
  std::unordered_map<NodeId, std::set<Ts>> asked_;  // my unanswered ClockWants per peer
  // Timestamp order of my shard. Keyed by (ts, txn id): a replica's
  // counter-proposal may equal a timestamp it issues later, and the txn id
  // breaks such ties identically on every replica.
  using QueueKey = std::pair<Ts, uint64_t>;
  std::map<QueueKey, uint64_t> queue_;
  std::set<QueueKey> undecided_;                     // queued CRTs whose decision has not arrived
  Ts last_proposal_{};                               // counter-proposals strictly increase
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_map<uint64_t, Vars> early_vars_;    // outputs that arrived before their entry
  std::unordered_map<uint64_t, TimeUs> released_;    // release notices seen before DistExe
  std::vector<NodeId> followers_;                    // the leader's: the shard's other replicas
  std::vector<std::pair<uint64_t, Ts>> order_out_;   // the leader's: executed, not yet sent to the followers
  std::deque<std::pair<uint64_t, Ts>> follow_;       // a follower's: the leader's order, not yet executed here
  std::set<uint64_t> skipped_;                       // mutant follower_skips_unstored only
  bool keep_log_ = false;
  std::vector<ExecRecord> exec_log_;
  uint64_t n_executed_ = 0;
  int64_t n_irts_ = 0, n_irts_behind_crt_ = 0, n_counter_proposals_ = 0;
  TimeUs wake_at_ = 0;                               // physical time a kWantTimer is set for (0: none)
};

// The coordinator role (replica 0 of a shard): one Coord per transaction its clients submitted, until the reply.
class Coordinator : public Role {
 public:
  Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q, Site& site);
  void on_submit(Env& env, NodeId from, ClientSubmit& m);
  void on_store_irt_ack(Env& env, NodeId from, const ::dast::StoreIRTAck& m);
  void on_remote_prepared(Env& env, const ::dast::RemotePrepared& m);
  void on_piece_result(Env& env, NodeId from, const ::dast::PieceResult& m);
  bool idle() const { return coords_.empty(); }
  double rtt_estimate_us(uint32_t region) const { return rtt_.at(region).value(); }
  uint64_t held_delay_samples() const;

 private:
  // A transaction's phase at its coordinator (set_phase checks the one transition): an Irt is stored at its
  // shards (acks counted) and answered once 2 of 3 copies per shard are stored and its outputs are in; a CRT is
  // Preparing (proposals counted) until every touched shard's leader and a majority of its replicas proposed,
  // then Decided (D = the largest proposal, handed to the regions' managers) and answered once its outputs are in.
  // Answered, the Coord is erased.
  enum class Phase { Irt, Preparing, Decided };
  struct Coord {
    uint64_t txn_id = 0;
    uint32_t home_shard = 0;
    TxnShape shape;
    NodeId client = 0;
    Phase phase = Phase::Irt;
    std::map<uint32_t, uint32_t> acks;                    // IRT: shard -> the replicas that stored it (bit r)
    std::map<uint32_t, std::map<uint32_t, Ts>> proposals; // CRT: shard -> replica -> proposal
    std::map<uint32_t, TimeUs> prepare_sent;              // CRT: region -> send time, until its first reply
    Ts decision;                                          // once Decided
    std::set<uint32_t> results;                           // shards whose outputs arrived
    Vars outputs;
  };
  static void set_phase(Coord& c, Phase to);
  void maybe_reply(Env& env, uint64_t txn_id);
  double anticipate_us(const Coord& c, uint32_t region) const;

  Site& site_;          // this replica's own site: it stores its IRTs there too, and issues timestamps from its clock
  StretchClock& clock_;
  std::unordered_map<uint64_t, Coord> coords_;
  std::vector<DelayEstimate> rtt_;                   // RTT to each region's prepare path
};

// A restarted replica's acknowledgements (voter.cc): it stores and acknowledges what it is sent, as a follower does,
// while its state follows a live replica of its shard (src/core/recovery.h).
class Voter : public txn::Voter {
 public:
  Voter(const Deployment& d, NodeId self, const Workload& w);
  bool adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) override;
  void on_message(Env& env, Envelope& m, ShardExecutor& state) override;
  void executed(uint64_t txn, const Piece& piece) override;
  // A later restarted peer's Seal: as Replica::seal, no record (its acknowledgements order nothing).
  bool seal(uint64_t epoch, std::string* record) override {
    (void)epoch;
    record->clear();
    return true;
  }
  std::map<std::string, int64_t> counters() const override;

 private:
  struct Copy {
    TxnRequest txn;
    uint32_t pieces_here = 0, executed = 0;
  };
  void store(const TxnRequest& t);
  const Deployment& d_;
  const NodeInfo& me_;
  std::unordered_map<uint64_t, Copy> stored_;   // what it acknowledged, until its state executed it here
  IdSet done_;                                   // transactions its state executed a piece of (a store after is moot)
  int64_t n_acks_ = 0, n_proposals_ = 0;
};

class Replica : public ReplicaNode {
 public:
  Replica(const Deployment& d, NodeId self, const Workload& w);
  // A restarted peer's rejoin: a follower's acknowledgements order nothing, so there is nothing to record; the epoch
  // only says its peers sealed.
  uint64_t epoch() const override { return epoch_; }
  bool seal(uint64_t epoch, std::string* record) override {
    epoch_ = std::max(epoch_, epoch);
    record->clear();
    return true;
  }
  void start(Env& env) override;
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env& env, uint64_t id) override;
  bool idle() const override { return site_.idle() && coord_.idle(); }
  const ShardExecutor& executor() const override { return site_.executor(); }
  // irts: IRTs queued at this replica as their output replica (one per IRT and
  // touched shard); irts_behind_undecided_crt: those queued above a CRT whose
  // decision had not arrived (they wait for it); counter_proposals: StoreCRTs
  // a leader answered above T_r; held_delay_samples: prepare round trips this coordinator did not believe
  // (DelayEstimate: held by a fault).
  std::map<std::string, int64_t> counters() const override;

  // Introspection for tests.
  const StretchClock& clock() const { return site_.clock(); }
  const std::vector<ExecRecord>& exec_log() const { return site_.exec_log(); }
  void keep_exec_log(bool on) { site_.keep_exec_log(on); }
  uint64_t executed() const { return site_.executed(); }
  double rtt_estimate_us(uint32_t region) const { return coord_.rtt_estimate_us(region); }

 private:
  void dispatch(Env& env, Envelope& msg);
  void drain_local(Env& env);

  const Options opts_;
  SelfQueue self_q_;
  Site site_;
  Coordinator coord_;
  TimeUs sync_interval_us_;
  uint64_t epoch_ = 0;
};

class Manager : public Node {
 public:
  Manager(const Deployment& d, NodeId self);
  void start(Env& env) override {}
  void on_message(Env& env, Envelope& msg) override;
  void on_timer(Env& env, uint64_t id) override {}
  bool idle() const override { return live_.empty(); }

 private:
  struct Live {
    Ts tr;
    std::vector<NodeId> touched;     // leaders of the touched shards in this region
    std::vector<NodeId> untouched;   // the region's other shards' leaders
    bool decided = false;            // the decision was handed out
    bool released = false;           // a cross-region input wait was released before the decision came
  };
  const Deployment& d_;
  const Options opts_;
  NodeId self_;
  uint32_t region_;
  Ts last_{};
  std::unordered_map<uint64_t, Live> live_;
};

// Replica 0 of every shard is its handler/coordinator (txn::handler_of): only
// handlers issue IRT timestamps, so the execution watermark needs just their
// clocks. Clients use txn::HandlerClientDriver.
using txn::handler_of;

}  // namespace txn::dast
