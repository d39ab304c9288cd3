// Wires a whole DAST deployment into the simulated network (no sockets).
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "client/client_node.h"
#include "protocols/dast/dast.h"
#include "sim/sim.h"

namespace txn::test {

// A client stand-in that records when each reply arrives.
class ProbeClient : public Node {
 public:
  void start(Env&) override {}
  void on_message(Env& env, const Envelope& m) override {
    if (m.has_reply()) replies[m.reply().txn_id()] = env.mono_us();
  }
  void on_timer(Env&, uint64_t) override {}
  std::map<uint64_t, TimeUs> replies;
};

struct DastCluster {
  Deployment d;
  std::unique_ptr<Workload> w;
  std::unique_ptr<sim::Network> net;
  std::vector<dast::Replica*> replicas;      // by node id order
  std::vector<ClientNode*> clients;

  // with_clients=false leaves client ids free for ProbeClients.
  DastCluster(Deployment dep, sim::Options o, bool with_clients) : d(std::move(dep)) {
    w = make_workload(d);
    net = std::make_unique<sim::Network>(d, o);
    for (const auto& n : d.nodes) {
      if (n.kind == NodeKind::Replica) {
        auto r = std::make_unique<dast::Replica>(d, n.id, *w);
        r->keep_exec_log(true);
        replicas.push_back(r.get());
        net->add(n.id, std::move(r));
      } else if (n.kind == NodeKind::Manager) {
        net->add(n.id, std::make_unique<dast::Manager>(d, n.id));
      } else if (with_clients) {
        auto c = std::make_unique<ClientNode>(d, n.id, *w,
                                              std::make_unique<dast::ClientDriverImpl>(d, n.id));
        clients.push_back(c.get());
        net->add(n.id, std::move(c));
      }
    }
  }
  // Put a reply-recording stand-in where client `id` would run.
  ProbeClient* attach_probe(NodeId id) {
    auto probe = std::make_unique<ProbeClient>();
    ProbeClient* p = probe.get();
    net->add(id, std::move(probe));
    return p;
  }
  dast::Replica* replica(uint32_t shard, uint32_t r) {
    return static_cast<dast::Replica*>(net->node(d.replica_id(shard, r)));
  }
  bool clients_finished() const {
    return std::all_of(clients.begin(), clients.end(), [](auto* c) { return c->finished(); });
  }
};

inline Deployment small_deployment(const std::string& workload, uint32_t regions = 3,
                                   uint32_t shards = 2) {
  Deployment d = make_local_deployment(regions, shards, 1);
  d.workload.name = workload;
  d.workload.scale = 0.002;
  d.client.n_concurrent = 2;
  d.client.duration_s = 3;
  d.client.warmup_s = 0.5;
  d.client.cooldown_s = 0.5;
  return d;
}

}  // namespace txn::test
