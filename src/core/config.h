// The deployment file (docs/deploy-schema.md), parsed and validated.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "node.h"

namespace txn {

// Any problem with the deployment file: message is one line naming the key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class NodeKind { Replica, Manager, Client };

struct NodeInfo {
  NodeId id = 0;
  std::string name;       // e.g. "s0.1.2" (region 0, shard-in-region 1, replica 2), "m0", "c0.1.0"
  NodeKind kind = NodeKind::Replica;
  uint32_t region = 0;    // 0-based
  uint32_t shard = 0;     // global shard id (region * N + local); replicas and clients
  uint32_t replica = 0;   // replicas only
  std::string host;       // IP or hostname
  uint16_t port = 0;
};

struct LinkModel {
  std::string mechanism = "app";              // app | netem | none
  std::vector<std::vector<double>> rtt_ms;     // R x R; diagonal = intra-region (and loopback)
  double jitter_ms = 0;                        // std-dev of each cross-region one-way delay (normal around rtt/2, clipped at 0)
  // One-way delay for a message from region a to region b, in microseconds (rtt/2).
  TimeUs one_way_us(uint32_t a, uint32_t b) const;
};

struct WorkloadConfig {
  std::string name = "tpcc";                  // tpcc | tpca
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
};

struct ClientConfig {
  uint32_t n_concurrent = 2;        // closed-loop coordinators per client process
  double duration_s = 10;
  double warmup_s = 2;
  double cooldown_s = 1;
  double drain_timeout_s = 10;      // after duration, wait this long for outstanding txns
  uint32_t retry_limit = 20;
};

struct DastConfig {
  double sync_interval_ms = 50;     // safety net: a site re-checks its queue and clock requests this often
                                    // (the waits themselves end on messages or on timers set for the moment)
  double anticipation_margin_ms = 0;  // added to the measured decision delay
  double ewma_alpha = 0.2;
  // A piece that waits for a cross-region value but commutes with every other
  // piece (Workload::commutes) runs when the value arrives, after later
  // transactions, instead of holding its region's clocks below the CRT.
  bool defer_commutative = true;
};

// SLOG's global-order group: the regions holding the 3 replicas of the global log
// (genConfig spreads them over the regions, so any R >= 3 works). Empty: none.
struct SlogConfig {
  std::vector<uint32_t> order_regions;
};

struct RuntimeConfig {
  double connect_timeout_s = 10;    // a peer unreachable this long is a fatal, named error
};

struct Deployment {
  std::string name = "local";
  std::string mode = "dast";        // dast | janus | tapir | slog
  uint32_t regions = 3;
  uint32_t shards_per_region = 2;
  uint32_t replicas = 3;
  uint64_t seed = 1;
  LinkModel link;
  WorkloadConfig workload;
  ClientConfig client;
  DastConfig dast;
  SlogConfig slog;
  RuntimeConfig runtime;
  std::vector<NodeInfo> nodes;      // indexed by NodeId

  uint32_t n_shards() const { return regions * shards_per_region; }
  uint32_t region_of_shard(uint32_t shard) const { return shard / shards_per_region; }
  const NodeInfo& node(NodeId id) const;
  const NodeInfo* find(const std::string& name) const;
  NodeId replica_id(uint32_t shard, uint32_t replica) const;   // throws if absent
  NodeId manager_id(uint32_t region) const;                     // throws if absent
  std::vector<NodeId> replicas_of(uint32_t shard) const;
  std::vector<NodeId> sites_of_region(uint32_t region) const;   // all replicas in a region
  std::vector<NodeId> clients() const;
};

// Parse + validate. Throws ConfigError with a one-line message naming the problem.
Deployment load_deployment(const std::string& path);
Deployment parse_deployment(const std::string& yaml_text);
// A ready-made deployment for tests/sim: R x N x 3 on 127.0.0.1 with ports from base_port,
// one manager per region, `clients_per_shard` client processes per shard.
Deployment make_local_deployment(uint32_t regions, uint32_t shards_per_region,
                                 uint32_t clients_per_shard, uint16_t base_port = 20000);
void validate(const Deployment& d);   // throws ConfigError

}  // namespace txn
