// Factory for protocol nodes. Each protocol provides a server-side node
// (one shard replica), optionally a region-manager node, and a client-side
// driver that moves one transaction from submission to commit/abort.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "executor.h"
#include "node.h"
#include "workload.h"

namespace txn {

// Client-side half of a protocol. The generic closed-loop client
// (src/runtime/client_node) owns the coordinators and metrics; it hands each
// transaction attempt to the driver and is called back when it finishes.
class ClientDriver {
 public:
  struct Outcome {
    uint64_t txn_id;
    bool committed;
    const Vars* outputs = nullptr;  // committed: every variable the pieces produced (as the reply carried them)
  };
  using Done = std::function<void(Env&, const Outcome&)>;
  virtual ~ClientDriver() = default;
  // Start one attempt of `txn` (attempt counts from 1).
  virtual void submit(Env& env, const TxnRequest& txn, uint32_t attempt) = 0;
  // Messages addressed to the client node are routed here.
  virtual void on_message(Env& env, const Envelope& msg) = 0;
  virtual void on_timer(Env& env, uint64_t id) { (void)env; (void)id; }
  void set_done(Done d) { done_ = std::move(d); }

 protected:
  Done done_;
};

struct ProtocolFactory {
  std::function<std::unique_ptr<Node>(const Deployment&, NodeId, const Workload&)> make_replica;
  std::function<std::unique_ptr<Node>(const Deployment&, NodeId)> make_manager;   // may be empty
  std::function<std::unique_ptr<ClientDriver>(const Deployment&, NodeId)> make_client_driver;
};

// Throws ConfigError("unknown mode 'x' (known: dast)") for an unknown or unbuilt protocol.
const ProtocolFactory& protocol_factory(const std::string& mode);
// Modes this build implements (printed by `txn-server --list-modes`, one per line).
const std::vector<std::string>& built_modes();

// Replica nodes execute every piece through a ShardExecutor (core/executor.h),
// which gives the server their store for the state dump and their execution
// history for the checker.
class ReplicaNode : public Node {
 public:
  virtual const ShardExecutor& executor() const = 0;
  const ShardStore& store() const { return executor().store(); }
  // Protocol counters written into the state dump under "counters" and summed
  // over the run (testbed/results.py server_counters); name -> value.
  virtual std::map<std::string, int64_t> counters() const { return {}; }
};

}  // namespace txn
