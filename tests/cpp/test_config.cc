#include <gtest/gtest.h>

#include <regex>

#include "core/config.h"
#include "core/protocol.h"
#include "scoped_protocol.h"

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
  EXPECT_EQ(d.role_node("manager", 1), 7u);
  EXPECT_EQ(d.node(7).kind, NodeKind::Role);
  EXPECT_EQ(d.node(7).role, "manager");
  EXPECT_EQ(d.role_nodes("manager"), (std::vector<NodeId>{6, 7}));
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
  expect_error(replace(kBase, "runtime:", "protocols: {dast: {defer_commutative: maybe}}\nruntime:"),
               "protocols.dast.defer_commutative: expected true or false, got 'maybe'");
  expect_error(replace(kBase, "mode: dast\n", ""), "mode: missing (built: dast");
  expect_error(replace(kBase, "kind: manager, region: 1", "kind: sequencer, region: 1"),
               "nodes[7].kind: 'sequencer' unknown (expected replica|client|manager)");
}

// The append workload's knobs (docs/workloads.md): accepted whatever the workload's name, each checked
// against its range with one line naming it.
TEST(Config, AppendKnobsAreParsedAndRangeChecked) {
  Deployment def = parse_deployment(kBase);
  EXPECT_EQ(def.workload.append_keys, 8);
  EXPECT_DOUBLE_EQ(def.workload.append_crt_ratio, 0.1);
  EXPECT_EQ(def.workload.append_read_tail, 4);
  auto with = [](const std::string& knobs) {
    return replace(kBase, "workload: {name: tpca, zipf: 0.5}", "workload: {name: tpca, zipf: 0.5, " + knobs + "}");
  };
  Deployment d = parse_deployment(
      replace(with("append_keys: 16, append_crt_ratio: 0.25, append_read_tail: 0"), "name: tpca", "name: append"));
  EXPECT_EQ(d.workload.name, "append");
  EXPECT_EQ(d.workload.append_keys, 16);
  EXPECT_DOUBLE_EQ(d.workload.append_crt_ratio, 0.25);
  EXPECT_EQ(d.workload.append_read_tail, 0);
  // The bounds, under another workload's name.
  Deployment lo = parse_deployment(with("append_keys: 1, append_crt_ratio: 0, append_read_tail: 0"));
  EXPECT_EQ(lo.workload.name, "tpca");
  EXPECT_EQ(lo.workload.append_keys, 1);
  Deployment hi = parse_deployment(with("append_keys: 100000, append_crt_ratio: 1, append_read_tail: 64"));
  EXPECT_EQ(hi.workload.append_keys, 100000);
  EXPECT_DOUBLE_EQ(hi.workload.append_crt_ratio, 1);
  EXPECT_EQ(hi.workload.append_read_tail, 64);
  expect_error(with("append_keys: 0"), "workload.append_keys: 0 out of range [1, 100000]");
  expect_error(with("append_keys: 100001"), "workload.append_keys: 100001 out of range [1, 100000]");
  expect_error(with("append_keys: 2.5"), "workload.append_keys: expected an integer, got '2.5'");
  expect_error(with("append_crt_ratio: 1.5"), "workload.append_crt_ratio: 1.5 out of range [0, 1]");
  expect_error(with("append_crt_ratio: -0.1"), "workload.append_crt_ratio: -0.1 out of range [0, 1]");
  expect_error(with("append_crt_ratio: often"), "workload.append_crt_ratio: expected a number, got 'often'");
  expect_error(with("append_read_tail: -1"), "workload.append_read_tail: -1 out of range [0, 64]");
  expect_error(with("append_read_tail: 65"), "workload.append_read_tail: 65 out of range [0, 64]");
  expect_error(with("append_tail: 4"), "workload.append_tail: unknown key");
  // Programmatic deployments are checked too (validate).
  Deployment p = make_local_deployment("dast", 2, 1, 1);
  p.workload.append_read_tail = 100;
  try {
    validate(p);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "workload.append_read_tail: 100 out of range [0, 64]");
  }
}

TEST(Config, ProtocolOptionsComeFromTheSchemaAndTheFile) {
  ProtocolOptions def = protocol_options(parse_deployment(kBase));
  EXPECT_TRUE(def.flag("defer_commutative"));
  EXPECT_DOUBLE_EQ(def.number("ewma_alpha"), 0.2);
  Deployment d = parse_deployment(
      replace(kBase, "runtime:", "protocols: {dast: {defer_commutative: false, ewma_alpha: 0.5}}\nruntime:"));
  EXPECT_FALSE(protocol_options(d).flag("defer_commutative"));
  EXPECT_DOUBLE_EQ(protocol_options(d).number("ewma_alpha"), 0.5);
  EXPECT_DOUBLE_EQ(protocol_options(d).number("sync_interval_ms"), 50);  // not set: the default
  // A whole number is fine for a double option; the typed view is strict about its own use.
  EXPECT_DOUBLE_EQ(protocol_options(parse_deployment(replace(kBase, "runtime:",
                                                             "protocols: {dast: {sync_interval_ms: 20}}\nruntime:")))
                       .number("sync_interval_ms"),
                   20);
  EXPECT_THROW(def.integer("ewma_alpha"), std::logic_error);
  EXPECT_THROW(def.flag("no_such_option"), std::logic_error);
}

TEST(Config, ProtocolOptionErrorsNameTheKey) {
  auto with = [](const std::string& section) { return replace(kBase, "runtime:", "protocols: " + section + "\nruntime:"); };
  expect_error(with("{dast: {ewma_alpha: 1.5}}"), "protocols.dast.ewma_alpha: 1.5 out of range [0, 1]");
  expect_error(with("{dast: {ewma_alpha: fast}}"), "protocols.dast.ewma_alpha: expected a number, got 'fast'");
  expect_error(with("{dast: {sync_interval_ms: 0}}"), "protocols.dast.sync_interval_ms: 0 out of range [0.1, 60000]");
  expect_error(with("{dast: {defer: true}}"),
               "protocols.dast.defer: not an option of dast (options: sync_interval_ms, anticipation_margin_ms, "
               "ewma_alpha, held_sample_factor, defer_commutative)");
  expect_error(with("{dast: [defer_commutative]}"), "protocols.dast: expected a mapping of options");
  expect_error(with("{paxos: {}}"), "protocols.paxos: 'paxos' unknown (built: dast");
  expect_error(with("[dast]"), "protocols: expected a mapping");
  // Checked for programmatic deployments too (validate).
  Deployment d = make_local_deployment("dast", 2, 1, 1);
  d.protocols["dast"]["anticipation_margin_ms"] = std::string("soon");
  try {
    validate(d);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "protocols.dast.anticipation_margin_ms: expected a number, got soon");
  }
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
  Deployment d = make_local_deployment("dast", 3, 2, 2, 30000);
  EXPECT_NO_THROW(validate(d));
  EXPECT_EQ(d.nodes.size(), 3u * 2 * 3 + 3 + 3 * 2 * 2);
  EXPECT_EQ(d.nodes[0].name, "s0.0.0");
  EXPECT_EQ(d.nodes[0].port, 30000);
  EXPECT_EQ(d.node(d.replica_id(3, 1)).name, "s1.1.1");
  EXPECT_EQ(d.mode, "dast");
  EXPECT_EQ(d.node(d.role_node("manager", 2)).name, "m2");
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
  EXPECT_DOUBLE_EQ(txn::make_local_deployment("dast", 1, 1, 1).runtime.connect_timeout_s, 10);
  std::string with = replace(kBase, "connect_timeout_s: 5", "connect_timeout_s: 2.5");
  EXPECT_DOUBLE_EQ(txn::parse_deployment(with).runtime.connect_timeout_s, 2.5);
  expect_error(replace(kBase, "connect_timeout_s: 5", "connect_timeout_s: 0"), "runtime.connect_timeout_s");
  expect_error(replace(kBase, "connect_timeout_s: 5", "connect_timeout: 1"), "connect_timeout");
}

TEST(ConfigRuntime, DeliveryGridIsParsedAndValidated) {
  EXPECT_EQ(txn::parse_deployment(kBase).runtime.delivery_grid_us, 250);   // the default
  const std::string base = replace(kBase, "connect_timeout_s: 5", "connect_timeout_s: 5, delivery_grid_us: 0");
  EXPECT_EQ(txn::parse_deployment(base).runtime.delivery_grid_us, 0);
  EXPECT_EQ(txn::parse_deployment(replace(base, "delivery_grid_us: 0", "delivery_grid_us: 1000")).runtime.delivery_grid_us,
            1000);
  expect_error(replace(base, "delivery_grid_us: 0", "delivery_grid_us: -1"), "runtime.delivery_grid_us");
  expect_error(replace(base, "delivery_grid_us: 0", "delivery_grid_us: 10001"), "runtime.delivery_grid_us");
  expect_error(replace(base, "delivery_grid_us: 0", "delivery_grid_us: 2.5"), "runtime.delivery_grid_us");
}

// Roles and the minimum number of regions come from the registry: a protocol
// registered here with a 2-member group role and 3 regions at least.
TEST(Config, RoleRulesComeFromTheRegistry) {
  ProtocolSpec p = find_protocol("dast");
  p.name = "grouped";
  p.min_regions = 2;
  p.roles = {{"order", "o", Placement::Group, 2, "a 2-member ordering group", p.roles[0].make}};
  txn::test::ScopedProtocol grouped(p);
  std::string base = replace(replace(replace(kBase, "mode: dast", "mode: grouped"), "name: m0, kind: manager",
                                     "name: o0, kind: order"),
                             "name: m1, kind: manager", "name: o1, kind: order");
  Deployment d = parse_deployment(base);
  EXPECT_EQ(d.role_nodes("order"), (std::vector<NodeId>{6, 7}));
  expect_error(replace(base, "name: o1, kind: order, region: 1", "name: o1, kind: order, region: 0"),
               "nodes[7]: second order in region 0 (its group needs distinct regions)");
  expect_error(replace(base, "  - {name: o1, kind: order, region: 1, host: 127.0.0.1, port: 20101}\n", ""),
               "nodes: mode grouped needs 2 order nodes in distinct regions, found 1");
  expect_error(replace(base, "kind: order, region: 1", "kind: manager, region: 1"),
               "nodes[7].kind: 'manager' unknown (expected replica|client|order)");
  // Generated deployments place a group's members in distinct regions, spread over all of them.
  Deployment gen = make_local_deployment("grouped", 5, 1, 1);
  std::vector<uint32_t> regions;
  for (NodeId id : gen.role_nodes("order")) regions.push_back(gen.node(id).region);
  EXPECT_EQ(regions, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(gen.node(gen.role_nodes("order")[1]).name, "o1");

  p.name = "wide";
  p.min_regions = 3;
  txn::test::ScopedProtocol wide(p);
  expect_error(replace(base, "mode: grouped", "mode: wide"), "regions: wide needs regions >= 3");
}

// Engine processes (docs/efficiency.md): the nodes of one process share a host, a region, and a life (clients or
// servers); messages for any of them go to the process's first node.
TEST(Config, ProcessesGroupNodesAndAreChecked) {
  std::string grouped = kBase;
  for (const char* n : {"s0.0.0", "s0.0.1", "s0.0.2"})
    grouped = replace(grouped, std::string("name: ") + n + ",", std::string("name: ") + n + ", process: srv0,");
  grouped = replace(grouped, "name: m0,", "name: m0, process: srv0,");
  Deployment d = parse_deployment(grouped);
  EXPECT_EQ(d.process_of(1), "srv0");
  EXPECT_EQ(d.process_of(3), "s1.0.0");   // no process: its own
  EXPECT_EQ(d.process_nodes("srv0"), (std::vector<NodeId>{0, 1, 2, 6}));
  EXPECT_EQ(d.process_nodes("s1.0.0"), (std::vector<NodeId>{3}));
  EXPECT_EQ(d.endpoint(6), 0u);
  EXPECT_EQ(d.endpoint(2), 0u);
  EXPECT_EQ(d.endpoint(4), 4u);
  expect_error(replace(grouped, "name: m0, process: srv0, kind: manager, region: 0, host: 127.0.0.1",
                       "name: m0, process: srv0, kind: manager, region: 0, host: 127.0.0.2"),
               "nodes[6].process: process 'srv0' on two hosts");
  expect_error(replace(grouped, "name: s1.0.0,", "name: s1.0.0, process: srv0,"),
               "nodes[3].process: process 'srv0' in two regions");
  expect_error(replace(grouped, "name: c1.0.0,", "name: c1.0.0, process: s1.0.0,"), "is the name of another node");
  std::string mixed = replace(grouped, "name: s1.0.0,", "name: s1.0.0, process: p1,");
  // A shard container's clients may share its servers' process (txn-server runs them).
  Deployment m = parse_deployment(replace(mixed, "name: c1.0.0,", "name: c1.0.0, process: p1,"));
  EXPECT_EQ(m.process_nodes("p1"), (std::vector<NodeId>{3, 8}));
  EXPECT_EQ(m.endpoint(8), 3u);
  expect_error(replace(grouped, "name: c1.0.0,", "name: c1.0.0, process: '',"), "nodes[8].process: must not be empty");
}

// Open loop (docs/workloads.md): client.rate_tps > 0 turns it on, client.max_outstanding bounds what waits; closed
// loop when the file sets no rate. A bad value is one line naming the key and its range.
TEST(Config, OpenLoopKnobsAreParsedAndRangeChecked) {
  Deployment def = parse_deployment(kBase);
  EXPECT_FALSE(def.client.open_loop());
  EXPECT_EQ(def.client.rate_tps, 0);
  EXPECT_EQ(def.client.max_outstanding, 1000u);
  auto with = [](const std::string& knobs) {
    return replace(kBase, "cooldown_s: 1}", "cooldown_s: 1, " + knobs + "}");
  };
  Deployment d = parse_deployment(with("rate_tps: 12.5, max_outstanding: 7"));
  EXPECT_TRUE(d.client.open_loop());
  EXPECT_DOUBLE_EQ(d.client.rate_tps, 12.5);
  EXPECT_EQ(d.client.max_outstanding, 7u);
  EXPECT_FALSE(parse_deployment(with("rate_tps: 0")).client.open_loop());
  EXPECT_EQ(parse_deployment(with("rate_tps: 1000000, max_outstanding: 10000000")).client.max_outstanding, 10000000u);
  auto message = [](const std::string& yaml) {
    try {
      parse_deployment(yaml);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(with("rate_tps: -1")), "client.rate_tps: -1 out of range [0, 1000000] (txn/s; 0: closed loop)");
  EXPECT_EQ(message(with("rate_tps: 2000000")),
            "client.rate_tps: 2e+06 out of range [0, 1000000] (txn/s; 0: closed loop)");
  EXPECT_EQ(message(with("rate_tps: fast")), "client.rate_tps: expected a number, got 'fast'");
  EXPECT_EQ(message(with("rate_tps: .nan")), "client.rate_tps: expected a finite number, got '.nan'");
  EXPECT_EQ(message(with("max_outstanding: 0")), "client.max_outstanding: 0 out of range [1, 10000000]");
  EXPECT_EQ(message(with("max_outstanding: 2.5")), "client.max_outstanding: expected an integer, got '2.5'");
  EXPECT_EQ(message(with("max_outstanding: 10000001")), "client.max_outstanding: 10000001 out of range [1, 10000000]");
}
