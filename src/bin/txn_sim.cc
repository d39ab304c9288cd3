// txn-sim: the engine's floor. Runs a whole deployment (replicas, role nodes,
// clients: the same protocol and workload code as txn-server/txn-client) on
// the simulated network, in virtual time, with no transport, and reports the
// CPU it took per committed transaction and the traffic by where its ends
// would run (docs/efficiency.md).
//
//   txn-sim --config DEPLOY.yml [--json | --by-kind]
//
// Traffic classes: "container" (both ends in one shard container: its
// replicas, its clients, and for the region's first container the role
// nodes), "region" (the same region, another container), "cross" (another
// region). --by-kind also breaks them down by sender kind, receiver kind and
// message body.
//
// Wake-ups: the least number of times the deployment's engine processes would
// have to wake for the same run -- every process woken exactly when a message
// or timer of one of its nodes falls due, on the delivery grid (a message at
// the cell end nearest its time, a timer at the end of its cell, as
// runtime/event_loop.h has them), never for a frame's arrival: what the layout
// and the protocol need, beside what the engine spends (engine_wakeups).
#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/client_node.h"
#include "core/config.h"
#include "core/protocol.h"
#include "core/usage.h"
#include "core/workload.h"
#include "sim/sim.h"

namespace {

using namespace txn;

int fail(const std::string& msg) {
  std::fprintf(stderr, "txn-sim: error: %s\n", msg.c_str());
  return 2;
}

// The shard container a node would run in (swarm placement, testbed/cluster/genconfig.py).
std::pair<uint32_t, uint32_t> container_of(const Deployment& d, const NodeInfo& n) {
  if (n.kind == NodeKind::Role) return {n.region, n.region * d.shards_per_region};
  return {n.region, n.shard};
}

}  // namespace

int main(int argc, char** argv) {
  std::string config;
  bool json = false, by_kind = false;
  static const option opts[] = {{"config", required_argument, nullptr, 'c'},
                                {"json", no_argument, nullptr, 'j'},
                                {"by-kind", no_argument, nullptr, 'k'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'c') config = optarg;
    else if (c == 'j') json = true;
    else if (c == 'k') by_kind = true;
    else if (c == 'h') { std::puts("usage: txn-sim --config DEPLOY.yml [--json | --by-kind]"); return 0; }
    else return fail(std::string("bad argument ") + argv[optind - 1] + "; usage: txn-sim --config DEPLOY.yml [--json | --by-kind]");
  }
  if (config.empty()) return fail("--config is required; usage: txn-sim --config DEPLOY.yml [--json | --by-kind]");
  Deployment d;
  std::unique_ptr<Workload> w;
  try {
    d = load_deployment(config);
    w = make_workload(d);
  } catch (const ConfigError& e) {
    return fail(e.what());
  }
  const ProtocolSpec& spec = find_protocol(d.mode);

  std::map<std::string, uint64_t> msgs, bytes, kinds;
  sim::Options o;
  o.seed = d.seed;
  auto kind = [](const NodeInfo& n) {
    return n.kind == NodeKind::Client ? "client" : n.kind == NodeKind::Role ? "role" : "replica";
  };
  o.tap = [&](NodeId from, NodeId to, const Envelope& m) {
    const NodeInfo &a = d.node(from), &b = d.node(to);
    const char* cls = a.region != b.region ? "cross" : container_of(d, a) == container_of(d, b) ? "container" : "region";
    ++msgs[cls];
    bytes[cls] += m.ByteSizeLong();
    if (const auto* f = m.GetDescriptor()->FindFieldByNumber(static_cast<int>(m.body_case())))
      ++kinds[std::string(cls) + " " + kind(a) + "->" + kind(b) + " " + f->name()];
  };
  // The wake-ups: per process, the last grid cell in which it was counted awake, and the last in which a message
  // fell due to it (events come in time order; -1: none yet).
  struct Awake {
    TimeUs any = -1, message = -1;
  };
  std::map<std::string, Awake> awake;
  uint64_t wakeups = 0, message_wakeups = 0;   // all; those in which a message falls due
  const TimeUs grid = std::max<TimeUs>(d.runtime.delivery_grid_us, 0);
  o.on_event = [&](NodeId node, TimeUs at, bool timer) {
    const TimeUs cell = grid == 0 ? at : timer ? (at + grid - 1) / grid : (at - grid / 2 + grid - 1) / grid;
    Awake& a = awake[d.process_of(node)];
    if (a.any != cell) ++wakeups;
    a.any = cell;
    if (timer) return;
    if (a.message != cell) ++message_wakeups;
    a.message = cell;
  };
  sim::Network net(d, o);
  std::vector<ClientNode*> clients;
  const double cpu0 = own_usage().cpu_s;
  const auto wall0 = std::chrono::steady_clock::now();
  for (const auto& n : d.nodes) {
    if (n.kind == NodeKind::Replica) {
      net.add(n.id, spec.make_replica(d, n.id, *w));
    } else if (n.kind == NodeKind::Role) {
      net.add(n.id, spec.role(n.role)->make(d, n.id));
    } else {
      auto c = std::make_unique<ClientNode>(d, n.id, *w, spec.make_client_driver(d, n.id));
      clients.push_back(c.get());
      net.add(n.id, std::move(c));
    }
  }
  net.start();
  const TimeUs limit = static_cast<TimeUs>((d.client.duration_s + d.client.drain_timeout_s + 60) * 1e6);
  const bool done = net.run_until(
      [&] {
        for (auto* c : clients)
          if (!c->finished()) return false;
        return true;
      },
      limit);
  const double cpu = own_usage().cpu_s - cpu0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  uint64_t committed = 0, given_up = 0;
  for (auto* c : clients)
    for (const auto& r : c->records()) (r.committed ? committed : given_up) += 1;
  uint64_t total = 0;
  for (const auto& [k, v] : msgs) total += v;
  if (json) {
    std::printf("{\"mode\": \"%s\", \"finished\": %s, \"virtual_s\": %.3f, \"cpu_s\": %.3f, \"wall_s\": %.3f, "
                "\"committed\": %llu, \"given_up\": %llu, \"txn_per_cpu_s\": %.1f, \"messages\": %llu, "
                "\"wakeups\": %llu",
                d.mode.c_str(), done ? "true" : "false", static_cast<double>(net.now()) / 1e6, cpu, wall,
                static_cast<unsigned long long>(committed), static_cast<unsigned long long>(given_up),
                cpu > 0 ? static_cast<double>(committed) / cpu : 0.0, static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(wakeups));
    for (const auto& [k, v] : msgs)
      std::printf(", \"msgs_%s\": %llu, \"bytes_%s\": %llu", k.c_str(), static_cast<unsigned long long>(v),
                  k.c_str(), static_cast<unsigned long long>(bytes[k]));
    std::printf("}\n");
  } else {
    std::printf("%s: %s %.1f virtual s in %.2f CPU s (%.2f wall s): %llu committed, %llu given up, "
                "%.0f committed txn per CPU s, %.1f messages and %.2f wake-ups per committed txn\n",
                d.mode.c_str(), done ? "finished" : "NOT finished", static_cast<double>(net.now()) / 1e6, cpu, wall,
                static_cast<unsigned long long>(committed), static_cast<unsigned long long>(given_up),
                cpu > 0 ? static_cast<double>(committed) / cpu : 0.0,
                committed ? static_cast<double>(total) / static_cast<double>(committed) : 0.0,
                committed ? static_cast<double>(wakeups) / static_cast<double>(committed) : 0.0);
    for (const auto& [k, v] : msgs)
      std::printf("  %-9s %10llu messages (%.1f per committed txn), %.0f bytes each\n", k.c_str(),
                  static_cast<unsigned long long>(v), committed ? static_cast<double>(v) / committed : 0.0,
                  v ? static_cast<double>(bytes[k]) / static_cast<double>(v) : 0.0);
  }
  if (by_kind && !json)
    std::printf("  wake-ups: %.2f per committed txn, %.2f of them for timers alone\n",
                committed ? static_cast<double>(wakeups) / committed : 0.0,
                committed ? static_cast<double>(wakeups - message_wakeups) / committed : 0.0);
  if (by_kind && !json)
    for (const auto& [k, v] : kinds) std::printf("    %-50s %.2f per committed txn\n", k.c_str(), committed ? static_cast<double>(v) / committed : 0.0);
  return done ? 0 : 1;
}
