#include <gtest/gtest.h>

#include <regex>

#include "core/config.h"

using namespace txn;

namespace {

const char* kBase = R"(name: t
mode: dast
regions: 2
shards_per_region: 1
replicas: 3
seed: 7
link:
  mechanism: app
  rtt_ms:
    - [5, 100]
    - [100, 5]
  jitter_ms: 1
workload: {name: tpca, zipf: 0.5}
client: {n_concurrent: 2, duration_s: 10, warmup_s: 2, cooldown_s: 1}
runtime: {connect_timeout_s: 5}
nodes:
  - {name: s0.0.0, kind: replica, region: 0, shard: 0, replica: 0, host: 127.0.0.1, port: 20000}
  - {name: s0.0.1, kind: replica, region: 0, shard: 0, replica: 1, host: 127.0.0.1, port: 20001}
  - {name: s0.0.2, kind: replica, region: 0, shard: 0, replica: 2, host: 127.0.0.1, port: 20002}
  - {name: s1.0.0, kind: replica, region: 1, shard: 0, replica: 0, host: 127.0.0.1, port: 20003}
  - {name: s1.0.1, kind: replica, region: 1, shard: 0, replica: 1, host: 127.0.0.1, port: 20004}
  - {name: s1.0.2, kind: replica, region: 1, shard: 0, replica: 2, host: 127.0.0.1, port: 20005}
  - {name: m0, kind: manager, region: 0, host: 127.0.0.1, port: 20100}
  - {name: m1, kind: manager, region: 1, host: 127.0.0.1, port: 20101}
  - {name: c1.0.0, kind: client, region: 1, shard: 0, host: 127.0.0.1, port: 20200}
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return p == std::string::npos ? s : s.replace(p, from.size(), to);
}

// Parsing must fail with a one-line message that contains `key`.
void expect_error(const std::string& yaml, const std::string& key) {
  try {
    parse_deployment(yaml);
    ADD_FAILURE() << "no error, expected one naming " << key;
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(key), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace

TEST(Config, ParsesBase) {
  Deployment d = parse_deployment(kBase);
  EXPECT_EQ(d.regions, 2u);
  EXPECT_EQ(d.seed, 7u);
  EXPECT_EQ(d.nodes.size(), 9u);
  EXPECT_EQ(d.workload.name, "tpca");
  EXPECT_EQ(d.link.one_way_us(0, 1), 50000);
  EXPECT_EQ(d.link.one_way_us(1, 1), 2500);
  EXPECT_EQ(d.node(3).shard, 1u);  // global shard id = region * N + local
  EXPECT_EQ(d.replica_id(1, 2), 5u);
  EXPECT_EQ(d.manager_id(1), 7u);
  EXPECT_EQ(d.replicas_of(0), (std::vector<NodeId>{0, 1, 2}));
  EXPECT_EQ(d.sites_of_region(1), (std::vector<NodeId>{3, 4, 5}));
  EXPECT_EQ(d.clients(), (std::vector<NodeId>{8}));
  ASSERT_NE(d.find("c1.0.0"), nullptr);
  EXPECT_EQ(d.find("c1.0.0")->shard, 1u);
  EXPECT_EQ(d.find("nope"), nullptr);
  EXPECT_THROW(d.replica_id(5, 0), ConfigError);
}

TEST(Config, Errors) {
  expect_error(replace(kBase, "[100, 5]", "[100]"), "link.rtt_ms");
  expect_error(replace(kBase, "[100, 5]", "[100]"), "row 1 has 1 entries");
  expect_error(replace(kBase, "[5, 100]", "[5, -1]"), "link.rtt_ms");
  expect_error(replace(kBase,
                       "  - {name: s1.0.2, kind: replica, region: 1, shard: 0, replica: 2, host: 127.0.0.1, port: 20005}\n",
                       ""),
               "has no replica 2");
  expect_error(replace(kBase, "region: 1, shard: 0, host: 127.0.0.1, port: 20200",
                       "region: 1, shard: 1, host: 127.0.0.1, port: 20200"),
               "nodes[8].shard");
  expect_error(replace(kBase, "port: 20200", "port: 20100"), "nodes[8].port");
  expect_error(replace(kBase, "port: 20200", "port: 70000"), "nodes[8].port");
  expect_error(replace(kBase, "zipf: 0.5", "zipf: 1.5"), "workload.zipf");
  expect_error(replace(kBase, "seed: 7", "seed: 7\nsede: 8"), "sede");
  expect_error(replace(kBase, "warmup_s: 2", "warmup_s: 9.5"), "client.warmup_s");
  expect_error(replace(kBase, "mode: dast", "mode: paxos"), "mode");
  expect_error(replace(kBase, "  - {name: m1, kind: manager, region: 1, host: 127.0.0.1, port: 20101}\n", ""),
               "no manager");
  expect_error(replace(kBase, "name: c1.0.0", "name: m0"), "duplicate name");
  expect_error(replace(kBase, "duration_s: 10", "duration_s: ten"), "client.duration_s");
  expect_error(replace(kBase, "workload: {name: tpca", "workload: {name: tpca, payment_crt_rate: 101"),
               "workload.payment_crt_rate");
  expect_error(replace(kBase, "runtime:", "dast: {defer_commutative: maybe}\nruntime:"),
               "dast.defer_commutative");
}

TEST(Config, DastDeferCommutative) {
  EXPECT_TRUE(parse_deployment(kBase).dast.defer_commutative);
  EXPECT_FALSE(parse_deployment(replace(kBase, "runtime:", "dast: {defer_commutative: false}\nruntime:"))
                   .dast.defer_commutative);
}

TEST(Config, MalformedYamlNamesLine) {
  try {
    parse_deployment(replace(kBase, "    - [100, 5]", "    - [100, 5"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::regex_search(std::string(e.what()), std::regex("line [0-9]+"))) << e.what();
  }
}

TEST(Config, MissingFile) { EXPECT_THROW(load_deployment("/nonexistent/deploy.yml"), ConfigError); }

TEST(Config, LocalDeployment) {
  Deployment d = make_local_deployment(3, 2, 2, 30000);
  EXPECT_NO_THROW(validate(d));
  EXPECT_EQ(d.nodes.size(), 3u * 2 * 3 + 3 + 3 * 2 * 2);
  EXPECT_EQ(d.nodes[0].name, "s0.0.0");
  EXPECT_EQ(d.nodes[0].port, 30000);
  EXPECT_EQ(d.node(d.replica_id(3, 1)).name, "s1.1.1");
  EXPECT_EQ(d.node(d.manager_id(2)).name, "m2");
  EXPECT_EQ(d.node(d.clients().back()).name, "c2.1.1");
  EXPECT_EQ(d.node(d.clients().back()).shard, 5u);
  for (size_t i = 0; i < d.nodes.size(); ++i) {
    EXPECT_EQ(d.nodes[i].id, i);
    EXPECT_EQ(d.nodes[i].port, 30000 + i);
    EXPECT_EQ(d.nodes[i].host, "127.0.0.1");
  }
}

TEST(ConfigRuntime, ConnectTimeoutIsParsedAndValidated) {
  EXPECT_DOUBLE_EQ(txn::parse_deployment(kBase).runtime.connect_timeout_s, 5);
  EXPECT_DOUBLE_EQ(txn::make_local_deployment(1, 1, 1).runtime.connect_timeout_s, 10);
  std::string with = replace(kBase, "connect_timeout_s: 5", "connect_timeout_s: 2.5");
  EXPECT_DOUBLE_EQ(txn::parse_deployment(with).runtime.connect_timeout_s, 2.5);
  expect_error(replace(kBase, "connect_timeout_s: 5", "connect_timeout_s: 0"), "runtime.connect_timeout_s");
  expect_error(replace(kBase, "connect_timeout_s: 5", "connect_timeout: 1"), "connect_timeout");
}

TEST(Config, SlogOrderGroup) {
  std::string with = replace(kBase, "runtime:", "slog: {order_regions: [1, 0, 1]}\nruntime:");
  expect_error(with, "slog.order_regions");
  expect_error(with, "region 1 listed twice");
  // regions: 2 here, so region 2 is out of range and a 3-region group cannot exist
  expect_error(replace(kBase, "runtime:", "slog: {order_regions: [0, 1, 2]}\nruntime:"), "slog.order_regions");
  expect_error(replace(kBase, "runtime:", "slog: {order_regions: [0, 1]}\nruntime:"), "3 distinct regions");
  expect_error(replace(kBase, "runtime:", "slog: {order: [0, 1, 2]}\nruntime:"), "slog.order");
}
