// The protocol plug-in contract (docs/adding-a-protocol.md). A protocol
// registers one ProtocolSpec: its name, the roles it needs besides shard
// replicas and clients, its minimum number of regions, its options schema and
// the factories of its nodes. Everything else (deployment validation, the
// txn-server/txn-client processes, the simulated cluster, the Python testbed)
// reads the registry and knows no protocol by name.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "executor.h"
#include "node.h"
#include "options.h"
#include "workload.h"

namespace txn {

// Client-side half of a protocol. The generic closed-loop client
// (src/client/client_node) owns the coordinators and metrics; it hands each
// transaction attempt to the driver and is called back when it finishes.
class ClientDriver {
 public:
  struct Outcome {
    uint64_t txn_id;
    bool committed;
    const Vars* outputs = nullptr;  // committed: every variable the pieces produced (as the reply carried them)
    // committed: the replicas per shard the commit rests on, as the reply reported them (ClientReply.stored)
    const google::protobuf::RepeatedPtrField<ShardCopies>* stored = nullptr;
  };
  using Done = std::function<void(Env&, const Outcome&)>;
  virtual ~ClientDriver() = default;
  // Start one attempt of `txn` (attempt counts from 1).
  virtual void submit(Env& env, const TxnRequest& txn, uint32_t attempt) = 0;
  // Messages addressed to the client node are routed here.
  virtual void on_message(Env& env, Envelope& msg) = 0;
  virtual void on_timer(Env& env, uint64_t id) { (void)env; (void)id; }
  void set_done(Done d) { done_ = std::move(d); }

 protected:
  Done done_;
};

// What a commit rests on (the checker's durability check, docs/checker.md): names in `reply` the replicas of
// `shard` (bit r: replica r) whose copies the commit rests on (ClientReply.stored).
inline void add_stored(ClientReply& reply, uint32_t shard, uint32_t replicas) {
  auto* st = reply.add_stored();
  st->set_shard(shard);
  st->set_replicas(replicas);
}
// The replicas a map keyed by replica index names, as a mask (bit r: replica r).
template <class ByReplica>
uint32_t replica_mask(const ByReplica& by_replica) {
  uint32_t mask = 0;
  for (const auto& [r, _] : by_replica) mask |= 1u << r;
  return mask;
}

// A shard replica. It executes every piece through a ShardExecutor
// (core/executor.h), which gives the server its store for the state dump and
// its execution history for the checker.
class ReplicaNode : public Node {
 public:
  virtual const ShardExecutor& executor() const = 0;
  const ShardStore& store() const { return executor().store(); }
  // Protocol counters written into the state dump under "counters" and summed
  // over the run (testbed/analysis/results.py server_counters); name -> value.
  virtual std::map<std::string, int64_t> counters() const { return {}; }
  // A restarted peer's rejoin (src/core/recovery.h, docs/fault-tolerance.md): the epoch this replica's votes carry
  // (0 until a peer of its shard rejoined), and its record for that peer. seal() moves it to `epoch` when that is
  // above its own, so that none of its votes cast before can count together with one cast after, and writes what a
  // rejoining replica's votes must respect (the protocol's own format, read by its Voter). False (the default): the
  // protocol keeps no votes a restarted replica could contradict, and a restarted replica of it votes nothing.
  virtual uint64_t epoch() const { return 0; }
  virtual bool seal(uint64_t epoch, std::string* record) { (void)epoch; (void)record; return false; }
};

// A restarted replica's part in its protocol (src/core/recovery.h): its state (store, history, execution) follows a
// live replica of its shard as a Learner's does; its votes are its own, cast from what the records of every other
// replica of its shard, sealed in the epoch it votes in, said, and from the protocol's messages it gets after. A
// protocol whose replicas vote (Janus's PreAccept replies, TAPIR's Prepare results, DAST's acknowledgements of a copy)
// gives one (ProtocolSpec::make_voter); one whose followers vote nothing (SLOG's execute their log) need not.
class Voter {
 public:
  virtual ~Voter() = default;
  // Start voting in `epoch` from the sealed records of the shard's other replicas (one each, in replica order), with
  // `state` what its replica holds now. False (nothing changed): a record that is not this protocol's.
  virtual bool adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) = 0;
  // One of its protocol's messages, once it votes; its replies carry the epoch. `state` is the replica's state (what
  // it has executed, as its source did): what a vote reads of it, and where declarations for the checker go.
  virtual void on_message(Env& env, Envelope& m, ShardExecutor& state) = 0;
  // Its replica took over the state of a live replica whose protocol recorded `record` then (unsealed; empty: none).
  // Called before executed() is told of anything after it; again when it takes over another's.
  virtual void follow(const std::string& record) { (void)record; }
  // Its state executed this piece of `txn` (as its source did), in that order.
  virtual void executed(uint64_t txn, const Piece& piece) = 0;
  // A later restarted peer of its shard asks it to seal (a second rejoin): move to `epoch` when above its own, vote in
  // it from now on, and write what its votes hold, as its replica's seal() would (the protocol's record format).
  // False: it cannot (the peer then does not vote).
  virtual bool seal(uint64_t epoch, std::string* record) { (void)epoch; (void)record; return false; }
  virtual std::map<std::string, int64_t> counters() const { return {}; }
};

// Where a role's processes go.
enum class Placement {
  PerRegion,  // one process in every region (e.g. DAST's region manager)
  Group,      // `size` processes, each in a different region (e.g. a global-ordering group)
};
const char* placement_name(Placement p);  // "per_region" | "group"

// A kind of process a protocol needs besides shard replicas and clients. In
// the deployment file its nodes have `kind: <name>`; generators name them
// <prefix><region> (PerRegion) or <prefix><member> (Group).
struct RoleSpec {
  std::string name;
  std::string prefix;
  Placement placement = Placement::PerRegion;
  uint32_t size = 1;  // Group: members (PerRegion: always 1 per region)
  std::string help;   // one line
  std::function<std::unique_ptr<Node>(const Deployment&, NodeId)> make;
};
// The region generators put member `member` of a group of `size` in: spread
// evenly over all regions (0, R/3, 2R/3 for 3 members), so no region holds two.
uint32_t group_member_region(uint32_t member, uint32_t size, uint32_t regions);

// The values of ProtocolSpec::guarantee, weakest first.
inline const std::vector<std::string>& guarantees() {
  static const std::vector<std::string> g{"serializable", "strict_serializable"};
  return g;
}

struct ProtocolSpec {
  std::string name;      // the deployment's `mode`: [a-z][a-z0-9_]*
  std::string summary;   // one line
  uint32_t min_regions = 1;
  // What its committed histories promise (kGuarantees): "strict_serializable" adds real-time order to
  // "serializable"; the checker holds a protocol to it (docs/protocol-registry.md).
  std::string guarantee = "serializable";
  // One line: the order key its replicas execute by and record in their histories (ShardExecutor::execute,
  // OrderKey in core/executor.h), which the checker compares at every replica; "" when it records none.
  std::string order_key;
  // Its replies name, per touched shard, the replicas a commit rests on (ClientReply.stored); the durability check
  // then holds every commit to a majority of each shard's replicas, and a reply that names none fails it.
  bool reports_copies = false;
  std::vector<RoleSpec> roles;
  std::vector<OptionSpec> options;
  std::function<std::unique_ptr<ReplicaNode>(const Deployment&, NodeId, const Workload&)> make_replica;
  std::function<std::unique_ptr<ClientDriver>(const Deployment&, NodeId)> make_client_driver;
  // A restarted replica's votes (Voter); none: a restarted replica of it takes no part in its protocol.
  std::function<std::unique_ptr<Voter>(const Deployment&, NodeId, const Workload&)> make_voter;

  const RoleSpec* role(const std::string& name) const;      // nullptr if it has no such role
  const OptionSpec* option(const std::string& name) const;  // nullptr if it has no such option
};

// ---- the registry --------------------------------------------------------
// Built-in protocols come from src/protocols/protocols.inc, one line each.

// Throws ConfigError "<key>: 'x' unknown (built: dast, ...)" ("<key>: missing (...)" for "").
const ProtocolSpec& find_protocol(const std::string& name, const std::string& key = "mode");
const ProtocolSpec* lookup_protocol(const std::string& name);  // nullptr if unknown
std::vector<std::string> protocol_names();                    // registration order; `--list-modes`
// The lines of src/protocols/protocols.inc, in order.
std::vector<std::string> built_in_protocols();
// Adds a protocol at run time (tests; built-in ones are listed in
// protocols.inc). Throws std::logic_error for an invalid spec or a taken name.
void register_protocol(ProtocolSpec spec);
// Removes a protocol registered at run time (tests). std::logic_error for a built-in one.
void unregister_protocol(const std::string& name);
// `txn-server --list-modes --json` (format: docs/protocol-registry.md).
std::string registry_json();

// d.mode's options: what the deployment sets, else the schema's defaults.
ProtocolOptions protocol_options(const Deployment& d);

}  // namespace txn
