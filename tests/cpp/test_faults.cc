// The nemesis's engine-side faults (core/faults.h, docs/nemesis.md): LinkChannels under each kind, the protocol
// clock under clock faults (in the simulator), the deployment file's `faults` list, and every registered protocol
// on the simulated network under a plan with every engine-side kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "core/config.h"
#include "core/link_emulator.h"
#include "sim/sim.h"
#include "sim_cluster.h"

using namespace txn;

namespace {

constexpr TimeUs kMs = 1000, kS = 1'000'000;

// 3 regions, one shard each (ids: region r's replicas are 3r..3r+2), RTT 5 ms inside, 100 ms across.
Deployment three_regions(const std::string& mode = "dast") {
  Deployment d = make_local_deployment(mode, 3, 1, 1);
  d.client.duration_s = 30;
  return d;
}
NodeId in_region(const Deployment& d, uint32_t r, uint32_t i = 0) { return d.sites_of_region(r).at(i); }

FaultWindow window(double from_s, double to_s) {
  return {static_cast<TimeUs>(from_s * kS), static_cast<TimeUs>(to_s * kS)};
}

LinkFault link_fault(const std::string& id, LinkFault::Kind kind, std::vector<RegionLink> links, TimeUs amount,
                     FaultWindow w) {
  LinkFault f;
  f.id = id;
  f.kind = kind;
  f.links = std::move(links);
  f.amount_us = amount;
  f.w = w;
  return f;
}

// Messages on one channel every `step`, from `t0` to `t1` (times since load start, which lies at `zero`): their due
// times (since load start), checked FIFO.
std::vector<std::pair<TimeUs, TimeUs>> send_stream(LinkChannels& ch, const Deployment& d, NodeId from, NodeId to,
                                                   TimeUs zero, TimeUs t0, TimeUs t1, TimeUs step, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<TimeUs, TimeUs>> out;
  TimeUs last = 0;
  for (TimeUs t = t0; t < t1; t += step) {
    const TimeUs due = ch.due(d, from, to, zero + t, rng) - zero;
    EXPECT_GE(due, last) << "FIFO broken at send " << t;
    EXPECT_GE(due, t);
    last = due;
    out.emplace_back(t, due);
  }
  return out;
}

}  // namespace

TEST(FaultPlan, PartitionHoldsUntilTheHealAndKeepsFifo) {
  Deployment d = three_regions();
  d.faults.partitions.push_back({"p", {1}, window(1, 2)});
  FaultAnchor zero;
  const TimeUs z = 7 * kS;   // load start on the channel's clock
  zero.set(z);
  LinkChannels ch(d.link);
  ch.set_faults(&d.faults, &zero);
  // region 0 -> region 1 crosses the cut: one-way 50 ms
  for (auto [sent, due] : send_stream(ch, d, in_region(d, 0), in_region(d, 1), z, 0, 3 * kS, 10 * kMs)) {
    const bool held = (sent >= 1 * kS && sent < 2 * kS) || (sent < 1 * kS && sent + 50 * kMs > 1 * kS);
    if (held) EXPECT_EQ(due, 2 * kS + 50 * kMs) << "sent at " << sent;   // leaves at the heal, in order
    else EXPECT_EQ(due, sent + 50 * kMs) << "sent at " << sent;
  }
  // and the other way, region 1 -> region 2
  LinkChannels back(d.link);
  back.set_faults(&d.faults, &zero);
  auto s = send_stream(back, d, in_region(d, 1), in_region(d, 2), z, 1500 * kMs, 1600 * kMs, 10 * kMs);
  for (auto [sent, due] : s) EXPECT_EQ(due, 2 * kS + 50 * kMs);
  // inside the cut region, and between the two other regions: untouched
  LinkChannels other(d.link);
  other.set_faults(&d.faults, &zero);
  for (auto [sent, due] : send_stream(other, d, in_region(d, 1), in_region(d, 1, 1), z, 0, 3 * kS, 50 * kMs))
    EXPECT_EQ(due, sent + 2500);
  for (auto [sent, due] : send_stream(other, d, in_region(d, 0), in_region(d, 2), z, 0, 3 * kS, 50 * kMs))
    EXPECT_EQ(due, sent + 50 * kMs);
}

TEST(FaultPlan, NothingAppliesBeforeTheAnchorIsKnown) {
  Deployment d = three_regions();
  d.faults.partitions.push_back({"p", {1}, window(0, 2)});
  d.faults.links.push_back(link_fault("s", LinkFault::Kind::Spike, {{0, 1}}, 100 * kMs, window(0, 2)));
  FaultAnchor zero;   // not set: the runner has not said go
  LinkChannels ch(d.link);
  ch.set_faults(&d.faults, &zero);
  std::mt19937_64 rng(1);
  EXPECT_EQ(ch.due(d, in_region(d, 0), in_region(d, 1), 1 * kS, rng), 1 * kS + 50 * kMs);
}

TEST(FaultPlan, SpikeAddsItsDelayOnItsLinksOnly) {
  Deployment d = three_regions();
  d.faults.links.push_back(link_fault("s", LinkFault::Kind::Spike, {{0, 1}}, 100 * kMs, window(1, 2)));
  FaultAnchor zero;
  zero.set(0);
  LinkChannels ch(d.link);
  ch.set_faults(&d.faults, &zero);
  TimeUs after_spike_min = kNoTime;
  for (auto [sent, due] : send_stream(ch, d, in_region(d, 0), in_region(d, 1), 0, 0, 3 * kS, 10 * kMs)) {
    if (sent >= 1 * kS && sent < 2 * kS) EXPECT_EQ(due, sent + 150 * kMs);
    else if (sent < 1 * kS) EXPECT_EQ(due, sent + 50 * kMs);
    else after_spike_min = std::min(after_spike_min, due - sent);
  }
  EXPECT_GE(after_spike_min, 50 * kMs);   // the first ones after it queue behind the spiked ones (FIFO)
  LinkChannels rev(d.link);
  rev.set_faults(&d.faults, &zero);
  for (auto [sent, due] : send_stream(rev, d, in_region(d, 1), in_region(d, 0), 0, 0, 3 * kS, 10 * kMs))
    EXPECT_EQ(due, sent + 50 * kMs);   // 1 -> 0 is another link
}

TEST(FaultPlan, SpikeIntoOneNodeDelaysOnlyMessagesToIt) {
  Deployment d = three_regions();
  LinkFault f = link_fault("s", LinkFault::Kind::Spike, {{0, 1}, {2, 1}}, 100 * kMs, window(1, 2));
  f.to_nodes = {"s1.0.2"};
  f.to_ids = {in_region(d, 1, 2)};
  d.faults.links.push_back(f);
  FaultAnchor zero;
  zero.set(0);
  LinkChannels ch(d.link);
  ch.set_faults(&d.faults, &zero);
  for (uint32_t from : {0u, 2u})   // into the one replica, from both regions: delayed in the window
    for (auto [sent, due] : send_stream(ch, d, in_region(d, from), in_region(d, 1, 2), 0, 0, 1500 * kMs, 10 * kMs))
      EXPECT_EQ(due, sent < 1 * kS ? sent + 50 * kMs : sent + 150 * kMs) << "sent at " << sent;
  for (uint32_t i : {0u, 1u})      // into its shard's other replicas, on the same links: untouched
    for (auto [sent, due] : send_stream(ch, d, in_region(d, 0), in_region(d, 1, i), 0, 0, 1500 * kMs, 10 * kMs))
      EXPECT_EQ(due, sent + 50 * kMs) << "sent at " << sent;
  for (auto [sent, due] : send_stream(ch, d, in_region(d, 1, 0), in_region(d, 1, 2), 0, 0, 1500 * kMs, 10 * kMs))
    EXPECT_EQ(due, sent + 2500);    // nor its own region's messages to it (not one of the links)
}

TEST(FaultPlan, JitterAddsBoundedRandomDelayAndKeepsFifo) {
  Deployment d = three_regions();
  d.faults.links.push_back(link_fault("j", LinkFault::Kind::Jitter, {{0, 0}}, 5 * kMs, window(1, 2)));
  FaultAnchor zero;
  zero.set(0);
  LinkChannels ch(d.link);
  ch.set_faults(&d.faults, &zero);
  std::set<TimeUs> delays;
  for (auto [sent, due] : send_stream(ch, d, in_region(d, 0), in_region(d, 0, 1), 0, 0, 3 * kS, 1 * kMs)) {
    if (sent < 1 * kS) {
      EXPECT_EQ(due, sent + 2500);
    }
    if (sent >= 1 * kS && sent < 2 * kS) {
      EXPECT_LE(due, sent + 2500 + 5 * kMs + 1 * kMs);   // at most the bound, plus FIFO behind a predecessor 1 ms older
      delays.insert(due - sent);
    }
  }
  EXPECT_GT(delays.size(), 50u);   // the delay really varies
}

TEST(FaultPlan, ClockOffsetAndDriftFromTheirStart) {
  FaultPlan p;
  p.clocks.push_back({"c", {"x"}, {4}, 50 * kMs, 1000, 2 * kS});   // +50 ms, 1000 ppm from t = 2 s
  p.clocks.push_back({"d", {"y"}, {6}, -7 * kMs, 0, 1 * kS, 3 * kS});   // -7 ms in [1, 3) s
  EXPECT_EQ(p.clock_shift(6, 2 * kS), -7 * kMs);
  EXPECT_EQ(p.clock_shift(6, 3 * kS), 0);   // stepped back at its end
  EXPECT_EQ(p.clock_shift(4, 1 * kS), 0);
  EXPECT_EQ(p.clock_shift(4, 2 * kS), 50 * kMs);
  EXPECT_EQ(p.clock_shift(4, 12 * kS), 50 * kMs + 10 * kMs);   // 10 s at 1000 ppm
  EXPECT_EQ(p.clock_shift(5, 12 * kS), 0);
}

namespace {
// Records now_us() - mono_us() (the protocol clock's shift) when its timer fires.
class ClockProbe : public Node {
 public:
  void start(Env& env) override {
    for (int i = 1; i <= 6; ++i) env.set_timer(i, i * kS);
  }
  void on_message(Env&, Envelope&) override {}
  void on_timer(Env& env, uint64_t id) override { shift[id] = env.now_us() - env.mono_us(); }
  std::map<uint64_t, TimeUs> shift;
};
}  // namespace

TEST(FaultPlan, SimulatorShiftsTheProtocolClockNotTheMonotonicOne) {
  Deployment d = three_regions();
  ClockFault c{"c", {"s2.0.0"}, {in_region(d, 2)}, -30 * kMs, 10000, 3 * kS};   // from t = 3 s: -30 ms, 1 %
  d.faults.clocks.push_back(c);
  sim::Options o;
  o.load_start_us = 1 * kS;   // so t = 3 s is virtual time 4 s
  sim::Network net(d, o);
  auto a = std::make_unique<ClockProbe>(), b = std::make_unique<ClockProbe>();
  ClockProbe *skewed = a.get(), *plain = b.get();
  net.add(in_region(d, 2), std::move(a));
  net.add(in_region(d, 0), std::move(b));
  net.start();
  net.run_until(10 * kS);
  EXPECT_EQ(skewed->shift.at(3), 0);
  EXPECT_EQ(skewed->shift.at(4), -30 * kMs);
  EXPECT_EQ(skewed->shift.at(6), -30 * kMs + 20 * kMs);   // 2 s after its start at 1 %
  for (auto [id, s] : plain->shift) EXPECT_EQ(s, 0);
}

TEST(FaultPlan, SimulatorHoldsMessagesAcrossAPartition) {
  Deployment d = three_regions();
  d.faults.partitions.push_back({"p", {0}, window(1, 2)});
  sim::Network net(d, {});
  struct Sink : Node {
    void start(Env&) override {}
    void on_message(Env& env, Envelope&) override { at.push_back(env.mono_us()); }
    void on_timer(Env&, uint64_t) override {}
    std::vector<TimeUs> at;
  };
  auto s = std::make_unique<Sink>();
  Sink* sink = s.get();
  net.add(in_region(d, 1), std::move(s));
  net.start();
  Envelope m;
  m.mutable_probe()->set_seq(1);
  for (TimeUs t : {500 * kMs, 1200 * kMs, 1900 * kMs}) {
    net.run_until(t);
    net.send(in_region(d, 0), in_region(d, 1), m);
  }
  net.run_until(5 * kS);
  EXPECT_EQ(sink->at, (std::vector<TimeUs>{550 * kMs, 2050 * kMs, 2050 * kMs}));
}

// The hook txn-sim counts wake-ups with: every message and timer handed to a simulated node, once, at its time.
TEST(Simulator, OnEventSeesEachDeliveryAndTimerAtItsTime) {
  Deployment d = three_regions();
  std::vector<std::tuple<NodeId, TimeUs, bool>> seen;
  sim::Options o;
  o.on_event = [&](NodeId n, TimeUs at, bool timer) { seen.emplace_back(n, at, timer); };
  sim::Network net(d, o);
  struct Ticker : Node {
    void start(Env& env) override { env.set_timer(7, 30 * kMs); }
    void on_message(Env&, Envelope&) override {}
    void on_timer(Env&, uint64_t) override {}
  };
  net.add(in_region(d, 0), std::make_unique<Ticker>());
  net.add(in_region(d, 1), std::make_unique<Ticker>());
  net.start();
  Envelope m;
  m.mutable_probe()->set_seq(1);
  net.run_until(10 * kMs);
  net.send(in_region(d, 0), in_region(d, 1), m);       // across: 50 ms one way
  net.send(in_region(d, 0), in_region(d, 0, 1), m);    // to a node not simulated: dropped, no event
  net.run_until(1 * kS);
  using E = std::tuple<NodeId, TimeUs, bool>;
  std::vector<E> want{E{in_region(d, 0), 30 * kMs, true}, E{in_region(d, 1), 30 * kMs, true},
                      E{in_region(d, 1), 60 * kMs, false}};
  std::sort(seen.begin(), seen.end(), [](const E& a, const E& b) { return std::get<1>(a) < std::get<1>(b) ||
      (std::get<1>(a) == std::get<1>(b) && std::get<0>(a) < std::get<0>(b)); });
  EXPECT_EQ(seen, want);
  EXPECT_EQ(net.dropped(), 1u);
}

// ---- the deployment file's `faults`

namespace {
const char* kFaultsBase = R"(name: t
mode: dast
regions: 3
shards_per_region: 1
link: {mechanism: app, rtt_ms: [[5, 100, 100], [100, 5, 100], [100, 100, 5]]}
client: {duration_s: 10, warmup_s: 2, cooldown_s: 1}
nodes:
  - {name: s0.0.0, kind: replica, region: 0, shard: 0, replica: 0, host: 127.0.0.1, port: 20000, process: shard0.0}
  - {name: s0.0.1, kind: replica, region: 0, shard: 0, replica: 1, host: 127.0.0.1, port: 20001, process: shard0.0}
  - {name: s0.0.2, kind: replica, region: 0, shard: 0, replica: 2, host: 127.0.0.1, port: 20002, process: shard0.0}
  - {name: s1.0.0, kind: replica, region: 1, shard: 0, replica: 0, host: 127.0.0.1, port: 20003}
  - {name: s1.0.1, kind: replica, region: 1, shard: 0, replica: 1, host: 127.0.0.1, port: 20004}
  - {name: s1.0.2, kind: replica, region: 1, shard: 0, replica: 2, host: 127.0.0.1, port: 20005}
  - {name: s2.0.0, kind: replica, region: 2, shard: 0, replica: 0, host: 127.0.0.1, port: 20006}
  - {name: s2.0.1, kind: replica, region: 2, shard: 0, replica: 1, host: 127.0.0.1, port: 20007}
  - {name: s2.0.2, kind: replica, region: 2, shard: 0, replica: 2, host: 127.0.0.1, port: 20008}
  - {name: m0, kind: manager, region: 0, host: 127.0.0.1, port: 20100}
  - {name: m1, kind: manager, region: 1, host: 127.0.0.1, port: 20101}
  - {name: m2, kind: manager, region: 2, host: 127.0.0.1, port: 20102}
  - {name: c0.0.0, kind: client, region: 0, shard: 0, host: 127.0.0.1, port: 20200}
)";

std::string with_faults(const std::string& faults) { return std::string(kFaultsBase) + "faults:\n" + faults; }

void expect_fault_error(const std::string& faults, const std::string& key, const std::string& what) {
  try {
    parse_deployment(with_faults(faults));
    ADD_FAILURE() << "no error, expected one naming " << key;
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(key), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}
}  // namespace

TEST(FaultConfig, ParsesEveryKind) {
  Deployment d = parse_deployment(with_faults(R"(  - {id: f1, kind: partition, regions: [1], start_s: 5, end_s: 8}
  - {id: f2, kind: spike, links: [[0, 1], [1, 0]], extra_ms: 100, start_s: 5, end_s: 8}
  - {id: f3, kind: jitter, links: [[0, 0]], jitter_ms: 5, start_s: 2, end_s: 6}
  - {id: f4, kind: clock, nodes: [s2.0.0, s2.0.1], offset_ms: 50, drift_ppm: -20, start_s: 1}
  - {id: f5, kind: pause, node: s0.0.1, start_s: 4, end_s: 6}
)"));
  ASSERT_EQ(d.faults.partitions.size(), 1u);
  EXPECT_EQ(d.faults.partitions[0].regions, std::vector<uint32_t>{1});
  EXPECT_EQ(d.faults.partitions[0].w.start_us, 5 * kS);
  EXPECT_EQ(d.faults.partitions[0].w.end_us, 8 * kS);
  ASSERT_EQ(d.faults.links.size(), 2u);
  EXPECT_EQ(d.faults.links[0].amount_us, 100 * kMs);
  EXPECT_TRUE(d.faults.links[0].covers(1, 0));
  EXPECT_EQ(d.faults.links[1].kind, LinkFault::Kind::Jitter);
  ASSERT_EQ(d.faults.clocks.size(), 1u);
  EXPECT_EQ(d.faults.clocks[0].ids, (std::vector<NodeId>{6, 7}));
  EXPECT_EQ(d.faults.clocks[0].offset_us, 50 * kMs);
  EXPECT_EQ(d.faults.clocks[0].drift_ppm, -20);
  EXPECT_TRUE(parse_deployment(kFaultsBase).faults.empty());
  // spikes into different nodes of one link may overlap in time; each holds only its own node's messages
  d = parse_deployment(with_faults(R"(  - {kind: spike, links: [[0, 1], [2, 1]], to_nodes: [s1.0.1], extra_ms: 150, start_s: 1, end_s: 8}
  - {kind: spike, links: [[0, 1]], to_nodes: [s1.0.2], extra_ms: 150, start_s: 1, end_s: 8}
)"));
  ASSERT_EQ(d.faults.links.size(), 2u);
  EXPECT_EQ(d.faults.links[0].to_nodes, std::vector<std::string>{"s1.0.1"});
  EXPECT_TRUE(d.faults.links[0].covers(2, 1, d.find("s1.0.1")->id));
  EXPECT_FALSE(d.faults.links[0].covers(2, 1, d.find("s1.0.2")->id));
}

TEST(FaultConfig, RejectsABadScheduleWithOneLine) {
  expect_fault_error("  - {kind: flood, start_s: 1, end_s: 2}\n", "faults[0].kind", "unknown");
  expect_fault_error("  - {kind: partition, regions: [1], start_s: -1, end_s: 2}\n", "start_s", ">= 0");
  expect_fault_error("  - {kind: partition, regions: [1], start_s: 1}\n", "faults[0].end_s", "missing");
  expect_fault_error("  - {kind: partition, regions: [1], start_s: 3, end_s: 2}\n", "end_s", "after start_s");
  expect_fault_error("  - {kind: partition, regions: [1], start_s: 8, end_s: 12}\n", "end_s", "past the run's end");
  expect_fault_error("  - {kind: partition, regions: [5], start_s: 1, end_s: 2}\n", "regions", "not in the deployment");
  expect_fault_error("  - {kind: partition, regions: [0, 1, 2], start_s: 1, end_s: 2}\n", "regions", "both sides");
  expect_fault_error("  - {kind: partition, regions: [1], start_s: 1, end_s: 3}\n"
                     "  - {kind: partition, regions: [2], start_s: 2, end_s: 4}\n", "partition 1", "overlaps");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], extra_ms: 0, start_s: 1, end_s: 2}\n", "extra_ms", "(0, 60000]");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], extra_ms: 5, start_s: 1, end_s: 3}\n"
                     "  - {kind: spike, links: [[2, 1], [0, 1]], extra_ms: 5, start_s: 2, end_s: 4}\n", "spike 1",
                     "overlaps");
  expect_fault_error("  - {kind: jitter, links: [[0]], jitter_ms: 5, start_s: 1, end_s: 2}\n", "links[0]", "[source region, destination region]");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], to_nodes: [s9.0.0], extra_ms: 5, start_s: 1, end_s: 2}\n",
                     "to_nodes", "not a node");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], to_nodes: [s2.0.1], extra_ms: 5, start_s: 1, end_s: 2}\n",
                     "to_nodes", "not the destination of link 0->1");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], to_nodes: [], extra_ms: 5, start_s: 1, end_s: 2}\n",
                     "to_nodes", "non-empty list");
  expect_fault_error("  - {kind: spike, links: [[0, 1]], to_nodes: [s1.0.1], extra_ms: 5, start_s: 1, end_s: 3}\n"
                     "  - {kind: spike, links: [[0, 1]], extra_ms: 5, start_s: 2, end_s: 4}\n", "spike 1", "overlaps");
  expect_fault_error("  - {kind: clock, nodes: [s9.0.0], offset_ms: 5}\n", "nodes", "not a node");
  expect_fault_error("  - {kind: clock, nodes: [s1.0.0]}\n", "clock 0", "neither");
  expect_fault_error("  - {kind: clock, nodes: [s1.0.0], offset_ms: 5}\n  - {kind: clock, nodes: [s1.0.0], drift_ppm: 5}\n",
                     "clock 1", "second clock fault");
  expect_fault_error("  - {kind: clock, nodes: [s1.0.0], offset_ms: 5, start_s: 3, end_s: 2}\n", "end_s", "after start_s");
  expect_fault_error("  kind: pause\n", "faults", "expected a list");
}

// The runner's kinds are not the engine's to read (core/faults.h): a pause or a crash the nemesis would refuse
// (a client paused, replica 0 crashed, a node that does not exist, a restart under grpc) is no concern of it, and
// nothing of them is in the plan it holds, so no engine code can learn which process will die or come back.
TEST(FaultConfig, TheRunnersPausesAndCrashesAreNotReadByTheEngine) {
  const Deployment d = parse_deployment(with_faults(R"(  - {id: f1, kind: pause, node: c0.0.0, start_s: 1, end_s: 30}
  - {id: f2, kind: crash, node: s0.0.0, start_s: 2, end_s: 3}
  - {id: f3, kind: crash, node: nowhere, start_s: 50}
  - {id: f4, kind: clock, nodes: [s2.0.0], offset_ms: 5}
)"));
  EXPECT_TRUE(d.faults.partitions.empty());
  EXPECT_TRUE(d.faults.links.empty());
  ASSERT_EQ(d.faults.clocks.size(), 1u);
  EXPECT_EQ(d.faults.clocks[0].id, "f4");
}

// ---- every protocol under every engine-side kind, on the simulated network

class FaultSim : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultSim, EveryEngineSideKindAtOnceStaysConsistentAndLive) {
  const std::string mode = GetParam();
  // list-append but for TAPIR, whose crossed CRTs livelock on its hot lists (test_protocol_sim.cc, kAppendLivelocks)
  Deployment d = txn::test::small_deployment(mode, mode == "tapir" ? "tpca" : "append");
  d.client.duration_s = 4;
  d.client.retry_limit = 1000;
  d.faults.partitions.push_back({"p", {1}, window(0.5, 1.5)});
  d.faults.links.push_back(link_fault("s", LinkFault::Kind::Spike, {{0, 2}, {2, 0}}, 80 * kMs, window(1.0, 2.5)));
  d.faults.links.push_back(link_fault("j", LinkFault::Kind::Jitter, {{0, 0}, {1, 1}, {2, 2}}, 4 * kMs, window(0.2, 3.5)));
  ClockFault c{"c", {}, {}, 20 * kMs, 2000, 0};
  for (NodeId id : d.sites_of_region(2)) c.ids.push_back(id);
  d.faults.clocks.push_back(c);
  sim::Options o;
  o.seed = 7;
  txn::test::SimCluster cl(std::move(d), std::move(o), true);
  txn::test::run_and_check(cl);
}

INSTANTIATE_TEST_SUITE_P(Registered, FaultSim, ::testing::ValuesIn(protocol_names()),
                         [](const auto& info) { return info.param; });
