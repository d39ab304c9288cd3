// Workloads: in-memory shard storage, transaction generators and the
// deterministic piece executor. Protocol code only sees this interface.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "config.h"
#include "txn.pb.h"

namespace txn {

using Vars = google::protobuf::Map<std::string, Value>;

// Everything a shard replica stores. Implementations are deterministic:
// replicas that execute the same pieces in the same order end identical.
class ShardStore {
 public:
  virtual ~ShardStore() = default;
  // Digest of the complete state (order-independent of hash-map iteration).
  virtual std::string digest() const = 0;
  // JSON object with the aggregates the consistency checker needs plus
  // "digest" and row counts (docs/checker.md).
  virtual std::string dump_json() const = 0;
  // A copy to evaluate pieces on without changing this store (optimistic
  // protocols read before they commit: ShardExecutor::evaluate). nullptr: the
  // store cannot be copied.
  virtual std::unique_ptr<ShardStore> clone() const { return nullptr; }
  // A trial on this store instead of a copy (ShardExecutor::evaluate): after begin_trial() returns true the store
  // remembers what execution changes, and end_trial() undoes it, leaving the store exactly as before (its digest
  // too). False: the store cannot (evaluate copies it with clone()). Trials do not nest.
  virtual bool begin_trial() { return false; }
  virtual void end_trial() {}
  // The complete state as bytes (what a restarted replica of the shard takes over: src/core/recovery.h), and back:
  // decode() replaces this store's state with what encode() of a store of the same workload and shard wrote; false
  // (and the store unchanged) when the bytes are not such a state. A store that cannot: encode() returns false.
  virtual bool encode(std::string* out) const { (void)out; return false; }
  virtual bool decode(const std::string& in) { (void)in; return false; }
};

// What a client needs to know to generate transactions.
struct ClientContext {
  uint32_t home_shard = 0;
  uint32_t client_index = 0;      // index of this coordinator among all coordinators of the home shard
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  // Populate one shard's tables (deterministic for (config, shard)).
  virtual std::unique_ptr<ShardStore> load(uint32_t shard) const = 0;
  // Generate the next transaction for a closed-loop coordinator. Sets type,
  // crt (classified from the generated keys), home_shard and pieces.
  // txn_id is left for the caller.
  virtual TxnRequest generate(std::mt19937_64& rng, const ClientContext& ctx) const = 0;
  // Execute one piece against its shard. `vars` holds args already merged
  // with the transaction's known variables (inputs are guaranteed present);
  // the piece's produced variables are written into `out`.
  // Deterministic: same store state + same inputs => same effects and outputs.
  virtual void execute(ShardStore& store, const Piece& piece, const Vars& vars,
                       Vars* out) const = 0;
  // True when the piece's effect commutes with every piece this workload
  // generates: it reads nothing any piece writes, writes nothing any piece
  // reads, and its result does not depend on its order among other pieces
  // (TPC-C's HISTORY insert: no transaction reads HISTORY, rows are a bag).
  // A protocol may then apply it after transactions ordered later.
  virtual bool commutes(const Piece& piece) const { (void)piece; return false; }
  // True when the client's transaction log keeps the outputs each committed
  // transaction returned (TxnLogEntry::outputs): for workloads whose checker
  // reads them (append's reads). Others leave the log at its usual size.
  virtual bool log_outputs() const { return false; }
  // Human-readable name of a transaction type (for raw records).
  virtual std::string type_name(uint32_t type) const = 0;
  virtual uint32_t n_types() const = 0;
};

// tpcc | tpca | append, configured from the deployment. Throws ConfigError for an unknown name.
std::unique_ptr<Workload> make_workload(const Deployment& d);

}  // namespace txn
