// The one place where every protocol's replica executes pieces: a
// ShardExecutor owns the shard's store and records, piece by piece, the order
// in which this replica executed them (its execution history). The server
// writes the history beside its state dump; the checker (docs/checker.md)
// compares histories across replicas, builds the conflict graph from them and
// replays them. Recording is one small append per executed piece.
#pragma once
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "recovery.pb.h"
#include "workload.h"

namespace txn {

// The key a protocol executed a piece by (docs/checker.md, "order key"): at one
// replica, of two conflicting pieces whose keys are set and share a domain, the
// one executed first has the smaller or equal (hi, lo), compared as integers.
// Keys of different domains are not compared (e.g. Janus's components, SLOG's
// regions). Unset: the protocol declares no key for the piece.
struct OrderKey {
  uint64_t domain = 0;
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool set = false;
  bool operator==(const OrderKey& o) const {
    return set == o.set && (!set || (domain == o.domain && hi == o.hi && lo == o.lo));
  }
  bool operator!=(const OrderKey& o) const { return !(*this == o); }
};

// A set key (a helper for the protocols' call sites).
inline OrderKey order_key(uint64_t domain, uint64_t hi, uint64_t lo) { return OrderKey{domain, hi, lo, true}; }

struct ExecEvent {
  uint64_t txn = 0;
  uint32_t piece = 0;
  // Run after its transaction's place in the order (a piece that commutes with
  // every other piece, executed when its inputs arrived).
  bool deferred = false;
  OrderKey key;  // the order key the protocol executed it by (unset: none declared)
};

// A replica's history file, written as its history grows (the engine's replicas: ShardExecutor::stream_to), so that
// what is written is no longer held in memory and a long run's memory stays flat. Written to `path` + ".part" and
// renamed to `path` once complete (ShardExecutor::finish_history): a process killed mid-run leaves only the .part.
struct HistoryFile {
  HistoryFile(std::string path, std::string node) : path(std::move(path)), node(std::move(node)) {}
  std::string path, node;
  std::ofstream out;
  size_t lines = 0;          // between the header and the trailer
  uint64_t header_bytes = 0;   // the header line's: where the events' lines begin
};

class ShardExecutor {
 public:
  // Events kept in memory while the history streams to its file: a transaction's line is written once at least
  // this many events came after it (what the protocol declares of it by then is on its line, as when the whole
  // history is written at the end); a declaration this late (a decision heard long after, a vote whose transaction
  // never executed here) gets a line of its own ("<txn> = q=... v=..."; docs/checker.md).
  static constexpr size_t kKeepEvents = 1024;   // the default; stream_to's `keep` (tests make it small)
  ShardExecutor(const Workload& w, uint32_t shard);
  // Execute one piece of transaction `txn_id` and record it. A piece the
  // workload rejects (BadMessage, rethrown) is recorded too: the rejection is
  // deterministic and a replay rejects it the same way. `key`: the order key
  // the protocol executed the piece by (none when unset).
  void execute(uint64_t txn_id, const Piece& p, const Vars& in, Vars* out, bool deferred = false,
               const OrderKey& key = {});
  // What executing `t`'s pieces on this shard would produce now, without
  // executing them: they run in order, each with its inputs from `vars`, which
  // gains their outputs, as a trial on the store that is undone after
  // (ShardStore::begin_trial) or, where the store has none, on a copy of it;
  // nothing is recorded and the store is left as it was. False (and nothing
  // evaluated) when a piece here lacks an input. Throws std::logic_error when
  // the workload's store can neither try nor be copied.
  bool evaluate(const TxnRequest& t, Vars* vars) const;
  const ShardStore& store() const { return *store_; }
  uint32_t shard() const { return shard_; }
  // The execution history in memory: every event in the simulator, the last ones (at least kKeepEvents) where it
  // streams to its file. events(): how many it executed in all, written or not.
  const std::deque<ExecEvent>& history() const { return history_; }
  uint64_t events() const { return written_ + history_.size(); }
  // The transactions the protocol made `txn_id` wait for here, where it orders by a dependency graph (Janus's
  // committed dependencies, TAPIR's): declared before its pieces execute, written once per transaction in the
  // history (" p=<ids>"). The checker holds every two conflicting pieces to them: the later one's transaction must
  // depend on the earlier one's, directly or through what any replica declared (docs/checker.md, "Declared
  // dependencies"). The first declaration of a transaction stands.
  void declare_deps(uint64_t txn_id, const std::vector<uint64_t>& deps);
  const std::unordered_map<uint64_t, std::vector<uint64_t>>& deps() const { return deps_; }
  // The dependencies this replica voted for `txn_id` before the decision (Janus's PreAccept reply), where the
  // protocol's decision must cover every replica's vote: written once per transaction (" v=<ids>"), the checker
  // requires them to be among the dependencies the transaction was then declared with here (docs/checker.md,
  // "Votes"). The first declaration stands. The vote is taken now: the history records how many pieces had
  // executed here then (" v=<executed>/<ids>"), so that the checker can tell which conflicting transactions were
  // still to execute here (a vote that must name them, or be named by theirs: Janus's pending ones). `marked`
  // false: no such mark (" v=<ids>"), where a vote need not name what is pending (TAPIR's Prepare OK: a replica
  // refuses a transaction that conflicts with one it holds, so its votes name applied transactions only).
  // `epoch`: the epoch the vote was cast in (a rejoin's, ReplicaNode::epoch), written " e=<epoch>" when above 0; a
  // vote cast again in a later epoch (asked again, the same) keeps its first dependencies and takes the later epoch.
  void declare_vote(uint64_t txn_id, const std::vector<uint64_t>& deps, bool marked = true, uint64_t epoch = 0);
  const std::unordered_map<uint64_t, std::vector<uint64_t>>& votes() const { return votes_; }
  // An attempt that aborted (it executes nowhere): what was declared of it goes (the history never writes it).
  void forget(uint64_t txn_id);
  const std::unordered_map<uint64_t, uint64_t>& vote_marks() const { return vote_marks_; }
  // The replicas (indexes in the shard) whose votes the decision of `txn_id` counted, where it may count fewer
  // than all (Janus after its PreAccept timeout), and, for a decision taken by an Accept round, those whose
  // acceptance it held (nullptr: a fast-path decision): written once (" q=<replicas>", " a=<replicas>"). The
  // checker then holds only the counted replicas to their votes, and requires the decision the same at every
  // replica of the shard, on a majority's votes, and either on every replica's (the fast quorum) or accepted by a
  // majority. Without it every vote counts. The first declaration stands.
  // `epoch`: the epoch of the votes the decision counted, written " qe=<epoch>" when above 0.
  void declare_quorum(uint64_t txn_id, const std::vector<uint32_t>& replicas, const std::vector<uint32_t>* accepted,
                      uint64_t epoch = 0);
  // The same from masks as messages carry them (bit r: replica r); `accepted` 0: a fast-path decision.
  void declare_quorum_masks(uint64_t txn_id, uint32_t replicas, uint32_t accepted, uint64_t epoch = 0);
  const std::unordered_map<uint64_t, std::vector<uint64_t>>& quorums() const { return quorums_; }
  const std::unordered_map<uint64_t, std::vector<uint64_t>>& acceptances() const { return accepted_; }
  // The history file (format in docs/checker.md); returns the number of lines
  // written between the header and the trailer.
  size_t write_history(std::ostream& o, const std::string& node) const;
  // From now on write the history to `f` as it grows (its header now; the lines of all but the last events, and
  // the declarations that came too late for their transaction's line, as they go out of memory). A restarted
  // replica's fresh executor takes its predecessor's file over (install() starts it anew). False: cannot write.
  bool stream_to(std::shared_ptr<HistoryFile> f, size_t keep = kKeepEvents);
  const std::shared_ptr<HistoryFile>& history_file() const { return file_; }
  size_t keep_events() const { return keep_; }
  // The rest of a streamed history, the trailer, and the file renamed to its name; false (and `err`) on failure.
  bool finish_history(std::string* err);
  // Hand over, from now on, every executed piece with the variables it ran with (recovery::Event, one per history
  // event): what a restarted replica of the shard that follows this one executes too (src/core/recovery.h). Off
  // while no restarted peer follows it (it costs a copy of every piece); take_tapped() takes what was kept so far.
  void tap(bool on) {
    tap_ = on;
    if (!on) tapped_.clear();
  }
  bool tapping() const { return tap_; }
  std::vector<recovery::Event> take_tapped() { return std::exchange(tapped_, {}); }
  // This replica's state as a restarted peer takes it over: the store (ShardStore::encode) and the history so far
  // (the events still in memory, and the dependencies declared; its votes and quorums are its own and stay here);
  // the events already written to its file are named by their bytes there (written_begin, written_end), for the
  // peer to fetch a chunk at a time (read_written), so that a snapshot is bounded whatever the run's length. False:
  // the workload's store cannot be encoded, or the file cannot be read.
  bool snapshot(recovery::Snapshot* out) const;
  // Take over a peer's snapshot: its store and history replace this executor's (which must have executed nothing).
  // False (nothing changed) when it is not a snapshot of this shard and workload. Its written events are then
  // still to come (take_written): until they all have, history_complete() is false and nothing more is written to
  // this executor's own file (its first lines must be those), what it executes meanwhile staying in memory.
  bool install(const recovery::Snapshot& s);
  // Lines of this replica's history file from byte `offset` (a snapshot's written_begin, or an earlier chunk's
  // `next`) up to `end` (its written_end), about `max_bytes` of them at most: as "<txn> <pieces> [d] [k=...]
  // [p=...]", this replica's own votes and decisions and its declaration lines left out, holding `events` events;
  // `next`: where the following chunk starts. False: those bytes are not whole lines of its file.
  bool read_written(uint64_t offset, uint64_t end, size_t max_bytes, std::string* text, uint64_t* next,
                    uint64_t* events) const;
  // A chunk of the installed snapshot's written events, in order (read_written's text and count). False: not lines
  // of that many events, or more than the snapshot said.
  bool take_written(const std::string& text, uint64_t events);
  bool history_complete() const { return awaiting_ == 0; }

 private:
  const Workload& w_;
  uint32_t shard_;
  std::unique_ptr<ShardStore> store_;
  std::deque<ExecEvent> history_;
  uint64_t written_ = 0;                    // events written to file_ (and gone from history_)
  uint64_t awaiting_ = 0;                   // an installed snapshot's written events still to come (take_written)
  std::deque<ExecEvent> fetched_;           // ... those come, where there is no file (added before history_ at the end)
  size_t keep_ = kKeepEvents;               // stream_to's
  std::shared_ptr<HistoryFile> file_;       // stream_to
  std::deque<std::pair<uint64_t, uint64_t>> declared_at_;   // streaming: (txn, events() then) per declaration
  void noted(uint64_t txn_id);              // streaming: a declaration of txn_id, to be written in time
  void spill();                             // streaming: what is old enough, to the file
  // history_[0, n) as lines (the transaction's declarations on its first line; `once`: those already written),
  // returning how many; `forget`: the declarations written are erased.
  size_t write_lines(std::ostream& o, size_t n, std::unordered_set<uint64_t>* once, bool forget);
  bool write_tokens(std::ostream& o, uint64_t txn, bool forget);   // " q=... v=... p=..." of txn; false: none

 public:
  // History lines back into events (each to `to`), as write_lines wrote them; returns how many.
  static uint64_t parse_lines(std::istream& in, const std::function<void(const ExecEvent&)>& to);

 private:
  std::unordered_map<uint64_t, std::vector<uint64_t>> deps_;   // declare_deps, sorted ids
  std::unordered_map<uint64_t, std::vector<uint64_t>> votes_;  // declare_vote, sorted ids
  std::unordered_map<uint64_t, uint64_t> vote_marks_;           // declare_vote: history_.size() then
  std::unordered_map<uint64_t, std::vector<uint64_t>> quorums_;  // declare_quorum, sorted replica indexes
  std::unordered_map<uint64_t, std::vector<uint64_t>> accepted_; // declare_quorum's acceptances (slow path)
  std::unordered_map<uint64_t, uint64_t> quorum_epochs_;   // the epochs above 0 declared
  // Every epoch a vote was cast in, ascending (the same vote cast again in a later epoch: both), where one is above 0.
  std::unordered_map<uint64_t, std::vector<uint64_t>> vote_epochs_;
  bool tap_ = false;
  std::vector<recovery::Event> tapped_;   // tap(): from then on, one per history event, until taken
};

// The variables piece `p` executes with: its args, plus its inputs' values from `known`. When the piece has no
// inputs that is its own args (no copy: a TPC-C new-order's first piece carries 40-odd); otherwise they are
// merged into *scratch. nullptr when an input is not in `known` yet, unless `partial` (then it is left out).
const Vars* piece_vars(const Piece& p, const Vars& known, Vars* scratch, bool partial = false);

// Digest of a transaction's outputs as its client receives them: every
// variable its pieces produced, sorted by name, with type and value. The
// client writes it per committed transaction; the replay computes it.
std::string outputs_digest(const Vars& outputs);

// Reference serial execution of one transaction on `stores` (indexed by global
// shard id): each piece as soon as its inputs are known. Returns the variables
// the pieces produced. A piece the workload rejects is skipped (as a replica
// skips it) and its message appended to *errors; a piece whose inputs never
// become known is reported there too.
Vars execute_serially(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores,
                      const TxnRequest& t, std::vector<std::string>* errors);

}  // namespace txn
