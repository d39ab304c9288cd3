// The protocol-neutral history checker of the simulated cluster.
//
// A second implementation, in C++, of the order checks of the end-to-end run
// checker: it mirrors docs/checker.md ("The checks", "The conflict graph (c)",
// "The replay (d)") and follows testbed/analysis/histories.py check for check, so a
// simulated run is judged exactly as a real run folder would be. Inputs are
// what every protocol leaves anyway: each replica's execution history
// (ShardExecutor::history(), core/executor.h) and final store digest, and each
// transaction a client finished (the TxnLogEntry its txn sink received, plus
// the outputs digest its record holds). It knows no protocol.
//
//   (a) order            every replica of a shard executed the same pieces, and
//                        every two conflicting pieces in the same order (per
//                        key: writes in order, reads between writes as a set);
//                        pieces that commute with everything
//                        (TxnLogEntry::commutative) are compared as multisets
//   (b) atomicity        every committed transaction executed exactly once at
//                        every replica of every shard it touches (each of its
//                        pieces there once); no given-up transaction, failed
//                        attempt or transaction no client finished executed;
//                        one abandoned at the drain (outcome unknown) executed
//                        either so or nowhere
//   (c) serializability  the union of the per-shard orders over conflicting
//                        pieces (read/write keys; commutative pieces take part in
//                        no conflict) has no cycle (the shortest one is
//                        reported); a deferred piece must commute
//   (d) replay           executing the committed transactions (and the
//                        abandoned ones some replica executed) serially
//                        (txn::execute_serially) in a topological order of that
//                        graph, from the initial load, reproduces every replica's
//                        final digest and every output a client received;
//                        skipped when (c) found a cycle
//   (f) order key        at every replica, of two conflicting pieces (one
//                        writes a key the other reads or writes; commutative
//                        and deferred pieces exempt) whose order keys
//                        (ExecEvent::key) are set and share a domain, the one
//                        executed first has the smaller or equal (hi, lo): the
//                        protocol executed by its own declared order
//                        (docs/protocol-registry.md, order_key). This sees a
//                        race every replica makes alike, which (a)-(d) accept
//                        as long as the run stays serializable. Where the
//                        protocol declared each transaction's dependencies
//                        (ReplicaRun::deps: Janus, TAPIR), every access to a
//                        key belongs to a transaction that depends (through
//                        the declared dependencies) on the one of each
//                        conflicting access just before it; and where a
//                        replica declared its vote (ReplicaRun::votes:
//                        Janus's PreAccept reply), the dependencies the
//                        transaction was decided with there hold every one it
//                        voted for
//
// The simulated cluster (sim_cluster.h) runs it after every run_and_check().
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/executor.h"
#include "core/workload.h"

namespace txn::test {

// One replica at the end of a run.
struct ReplicaRun {
  std::string node;                // its name, e.g. "s0.1.2"
  uint32_t shard = 0;
  std::vector<ExecEvent> history;  // in execution order
  std::string digest;              // the final store digest
  // The dependencies the protocol declared per transaction (ShardExecutor::deps(); empty: none declared).
  std::unordered_map<uint64_t, std::vector<uint64_t>> deps;
  // The dependencies it voted for per transaction before the decision (ShardExecutor::votes(); empty: none).
  std::unordered_map<uint64_t, std::vector<uint64_t>> votes;
  // The replicas whose votes each decision counted, where it named them (ShardExecutor::quorums(); absent: all).
  std::unordered_map<uint64_t, std::vector<uint64_t>> quorums;
  // Those whose acceptance a decision taken by an Accept round held (ShardExecutor::acceptances(); absent: fast).
  std::unordered_map<uint64_t, std::vector<uint64_t>> accepted;
  // Per voted transaction, how many pieces had executed here when the vote was cast (ShardExecutor::vote_marks()).
  std::unordered_map<uint64_t, uint64_t> vote_marks;
};

// One transaction as a client finished it.
struct FinishedTxn {
  std::string client;                // the client node's name
  const TxnLogEntry* entry = nullptr;  // as the client's txn sink received it (the caller keeps it)
  std::string outputs;               // committed: outputs_digest of what the client received (TxnRecord::outputs)
};

struct RunHistory {
  // Per shard, the first replica listed is the reference the others are compared with in (a).
  std::vector<ReplicaRun> replicas;
  std::vector<FinishedTxn> txns;
  // Problems found while collecting the inputs (e.g. a client whose sink missed
  // transactions); reported as violations of the check "inputs".
  std::vector<std::string> input_problems;
};

struct HistoryVerdict {
  // Violation lines per check; each lists at most kMaxListed and then "... and N more".
  static constexpr size_t kMaxListed = 20;
  std::vector<std::string> inputs, order, atomicity, serializability, replay, order_key;
  std::string replay_skipped;  // why (d) did not run ("" when it ran)
  size_t conflict_edges = 0;
  size_t committed = 0;
  bool ok() const {
    return inputs.empty() && order.empty() && atomicity.empty() && serializability.empty() && replay.empty() &&
           order_key.empty();
  }
};

// Runs (a)-(d) and (f). `w` is the run's workload (it loads the initial state of
// shards 0 .. n_shards-1 and executes the replay).
HistoryVerdict check_histories(const Workload& w, uint32_t n_shards, const RunHistory& run);

// One ADD_FAILURE per violation line: "<context>: history check (c) serializability: <line>".
void report_history_failures(const HistoryVerdict& v, const std::string& context);

}  // namespace txn::test
