// The deployment file (docs/deploy-schema.md), parsed and validated.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "faults.h"
#include "node.h"
#include "options.h"

namespace txn {

// Any problem with the deployment file: message is one line naming the key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every protocol has shard replicas and clients; other processes play one of
// the roles its registration declares (src/core/protocol.h).
enum class NodeKind { Replica, Role, Client };

struct NodeInfo {
  NodeId id = 0;
  std::string name;       // e.g. "s0.1.2" (region 0, shard-in-region 1, replica 2), "m0", "c0.1.0"
  NodeKind kind = NodeKind::Replica;
  std::string role;       // kind Role: the role's name (the node's `kind` in the file, e.g. "manager")
  uint32_t region = 0;    // 0-based
  uint32_t shard = 0;     // global shard id (region * N + local); replicas and clients
  uint32_t replica = 0;   // replicas only
  std::string host;       // IP or hostname
  uint16_t port = 0;
  // The engine process the node runs in (docs/efficiency.md): nodes with the same name share one process, one
  // event loop and one listening port (their first node's); messages between them never leave the process. Empty:
  // a process of its own. The nodes of one process share host and region, and are all clients or all servers.
  std::string process;
};

struct LinkModel {
  std::string mechanism = "app";              // app | netem | none
  std::vector<std::vector<double>> rtt_ms;     // R x R; diagonal = intra-region (and loopback)
  double jitter_ms = 0;                        // std-dev of each cross-region one-way delay (normal around rtt/2, clipped at 0)
  // One-way delay for a message from region a to region b, in microseconds (rtt/2).
  TimeUs one_way_us(uint32_t a, uint32_t b) const;
};

struct WorkloadConfig {
  std::string name = "tpcc";                  // tpcc | tpca | append
  double scale = 0.01;                         // table-size multiplier (1.0 = the artifact's sizes)
  // TPC-C
  std::vector<double> mix = {44, 44, 4, 4, 4}; // NewOrder, Payment, Delivery, OrderStatus, StockLevel
  int payment_crt_rate = -1;                   // -1: natural 15 % remote customer; 0..100: forced CRT %% of Payments (100 % Payment mix)
  double remote_item_prob = 0.01;              // per New-Order line
  double remote_customer_prob = 0.15;          // Payment, when payment_crt_rate == -1
  double by_name_prob = 0.40;                  // Payment / Order-Status by last name
  std::string district = "fixed";              // fixed: per coordinator (artifact); uniform: per transaction (TPC-C 2.4.1.2)
  // TPC-A
  double zipf = 0.5;                           // coefficient in [0, 1]
  int64_t tpca_rows = 100000;                  // rows per table in total (before scale)
  double tpca_crt_ratio = 0.10;
  // append (Elle-style list-append, docs/workloads.md); accepted whatever the name
  int64_t append_keys = 8;                     // lists per shard, 1..100000
  double append_crt_ratio = 0.10;              // share of transactions forced cross-region, [0, 1]
  int64_t append_read_tail = 4;                // trailing elements a read returns, 0..64
};

struct ClientConfig {
  uint32_t n_concurrent = 2;        // closed-loop coordinators per client process
  double duration_s = 10;
  double warmup_s = 2;
  double cooldown_s = 1;
  double drain_timeout_s = 10;      // after duration, wait this long for outstanding txns
  uint32_t retry_limit = 20;
  // How an aborted attempt is retried (docs/workloads.md, "Retries"): 0, at once (the DAST artifact's way); > 0, after
  // a randomized exponential backoff, uniform in [0, min(retry_backoff_max_ms, retry_backoff_ms * 2^(k-1))] after
  // the k-th abort, as the benchmark clients of TAPIR's authors (and the Basil harness built on them) do.
  double retry_backoff_ms = 0;
  double retry_backoff_max_ms = 5000;
  // Open loop (docs/workloads.md): > 0: transactions arrive at this rate per second at this client (node), Poisson
  // (exponential gaps drawn from its rng), and each one's latency counts from its arrival, so a stalled system
  // cannot slow its own measurement; its n_concurrent coordinators take the arrivals in arrival order, an arrival
  // that finds none free waits. 0: closed loop (a coordinator issues its next transaction when its last finished).
  double rate_tps = 0;
  // Open loop: at most this many transactions running or waiting for a coordinator; an arrival beyond it is shed
  // (counted, never run), so an overloaded client's queue cannot grow without bound.
  uint32_t max_outstanding = 1000;
  bool open_loop() const { return rate_tps > 0; }
};

struct RuntimeConfig {
  double connect_timeout_s = 10;    // a peer unreachable this long is a fatal, named error
  std::string transport = "tcp";    // between processes: "tcp" (length-prefixed batches) or "grpc" (txn.Peer)
  // Emulated delays end on this grid of the steady clock (us; 0: exactly when due): what falls due around one cell
  // end is delivered in one wake-up of the process, a message within half a cell of its time, a timer late by less
  // than a cell (runtime/event_loop.h). Not with link mechanism "none" (no delays to round).
  int64_t delivery_grid_us = 250;
};

struct Deployment {
  std::string name = "local";
  std::string mode;                 // a registered protocol (required)
  uint32_t regions = 3;
  uint32_t shards_per_region = 2;
  uint32_t replicas = 3;
  uint64_t seed = 1;
  LinkModel link;
  WorkloadConfig workload;
  ClientConfig client;
  // protocols.<name>: the options the file sets, per protocol, checked against
  // that protocol's schema; protocol_options(d) adds the defaults for d.mode.
  std::map<std::string, OptionValues> protocols;
  RuntimeConfig runtime;
  std::vector<NodeInfo> nodes;      // indexed by NodeId
  FaultPlan faults;                 // the nemesis's schedule (docs/nemesis.md); empty: none

  uint32_t n_shards() const { return regions * shards_per_region; }
  uint32_t region_of_shard(uint32_t shard) const { return shard / shards_per_region; }
  const NodeInfo& node(NodeId id) const;
  const NodeInfo* find(const std::string& name) const;
  NodeId replica_id(uint32_t shard, uint32_t replica) const;   // throws if absent
  NodeId role_node(const std::string& role, uint32_t region) const;  // the role's node in a region; throws if absent
  std::vector<NodeId> role_nodes(const std::string& role) const;
  std::vector<NodeId> replicas_of(uint32_t shard) const;
  std::vector<NodeId> sites_of_region(uint32_t region) const;   // all replicas in a region
  std::vector<NodeId> clients() const;
  // The node's process name (its own name when it has a process of its own) and the nodes in it, by id.
  const std::string& process_of(NodeId id) const;
  std::vector<NodeId> process_nodes(const std::string& process) const;
  // Where messages for `id` go: the first node of its process (whose host:port the process listens on).
  NodeId endpoint(NodeId id) const;
};

// Parse + validate. Throws ConfigError with a one-line message naming the problem.
Deployment load_deployment(const std::string& path);
Deployment parse_deployment(const std::string& yaml_text);
// A ready-made deployment for tests/sim: R x N x 3 on 127.0.0.1 with ports from base_port,
// the nodes of every role `mode` registers, `clients_per_shard` client processes per shard.
Deployment make_local_deployment(const std::string& mode, uint32_t regions, uint32_t shards_per_region,
                                 uint32_t clients_per_shard, uint16_t base_port = 20000);
void validate(const Deployment& d);   // throws ConfigError

}  // namespace txn
