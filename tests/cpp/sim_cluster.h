// A whole deployment of any registered protocol on the simulated network
// (no sockets): replicas, role nodes and clients all come from the protocol's
// registration, so nothing here knows a protocol by name.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/client_node.h"
#include "core/protocol.h"
#include "core/recovery.h"
#include "history_check.h"
#include "sim/sim.h"

namespace txn::test {

// A client stand-in that records when each reply arrives.
class ProbeClient : public Node {
 public:
  void start(Env&) override {}
  void on_message(Env& env, Envelope& m) override {
    if (m.has_reply()) {
      replies[m.reply().txn_id()] = env.mono_us();
      committed[m.reply().txn_id()] = m.reply().committed();
    }
  }
  void on_timer(Env&, uint64_t) override {}
  std::map<uint64_t, TimeUs> replies;
  std::map<uint64_t, bool> committed;
};

struct SimCluster {
  Deployment d;
  const ProtocolSpec& spec;
  std::unique_ptr<Workload> w;
  std::unique_ptr<sim::Network> net;
  std::vector<ReplicaNode*> replicas;  // in node id order
  std::vector<ClientNode*> clients;
  std::vector<NodeId> client_ids;  // of clients[i]
  // What each client's txn sink received (SimCluster installs it on every
  // client it builds), in the order of the client's records(): the history
  // checker's transactions.
  std::map<NodeId, std::vector<TxnLogEntry>> txn_logs;

  // with_clients=false leaves client ids free for ProbeClients.
  SimCluster(Deployment dep, sim::Options o, bool with_clients)
      : d(std::move(dep)), spec(find_protocol(d.mode)) {
    validate(d);
    w = make_workload(d);
    net = std::make_unique<sim::Network>(d, std::move(o));
    for (const auto& n : d.nodes) {
      if (n.kind == NodeKind::Replica) {
        auto r = serve_catch_up(d, n.id, spec.make_replica(d, n.id, *w));   // as the engine builds it
        replicas.push_back(&static_cast<CatchUpServer*>(r.get())->inner());
        net->add(n.id, std::move(r));
      } else if (n.kind == NodeKind::Role) {
        net->add(n.id, spec.role(n.role)->make(d, n.id));
      } else if (with_clients) {
        auto c = std::make_unique<ClientNode>(d, n.id, *w, spec.make_client_driver(d, n.id));
        std::vector<TxnLogEntry>* log = &txn_logs[n.id];
        c->set_txn_sink([log](const TxnLogEntry& e) { log->push_back(e); });
        clients.push_back(c.get());
        client_ids.push_back(n.id);
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
  // The protocol's replica (or a restarted one's Learner) inside the catch-up server the engine wraps it in.
  ReplicaNode* replica(uint32_t shard, uint32_t r) const {
    auto* n = static_cast<ReplicaNode*>(net->node(d.replica_id(shard, r)));
    auto* served = dynamic_cast<CatchUpServer*>(n);
    return served ? &served->inner() : n;
  }
  // The node as the engine runs it (the catch-up server, with its counters).
  ReplicaNode* served(uint32_t shard, uint32_t r) const {
    return static_cast<ReplicaNode*>(net->node(d.replica_id(shard, r)));
  }
  bool clients_finished() const {
    return std::all_of(clients.begin(), clients.end(), [](auto* c) { return c->finished(); });
  }
};

// A small deployment of `mode` that the simulator runs in well under a second.
inline Deployment small_deployment(const std::string& mode, const std::string& workload, uint32_t regions = 3,
                                   uint32_t shards = 2) {
  Deployment d = make_local_deployment(mode, regions, shards, 1);
  d.workload.name = workload;
  d.workload.scale = 0.002;
  d.client.n_concurrent = 2;
  d.client.duration_s = 3;
  d.client.warmup_s = 0.5;
  d.client.cooldown_s = 0.5;
  return d;
}

// The history checker's inputs from a finished cluster: every replica's
// execution history and digest (replica 0 of each shard first), and every
// transaction the clients finished, each committed one with the outputs digest
// its client recorded. The transactions point into c.txn_logs.
inline RunHistory history_of(const SimCluster& c) {
  RunHistory h;
  for (uint32_t s = 0; s < c.d.n_shards(); ++s)
    for (uint32_t r = 0; r < c.d.replicas; ++r) {
      const ReplicaNode* rep = c.replica(s, r);
      const auto& ev = rep->executor().history();
      h.replicas.push_back({c.d.node(c.d.replica_id(s, r)).name, s, {ev.begin(), ev.end()}, rep->store().digest(),
                            rep->executor().deps(), rep->executor().votes(), rep->executor().quorums(),
                            rep->executor().acceptances(), rep->executor().vote_marks()});
    }
  for (size_t k = 0; k < c.clients.size(); ++k) {
    const std::string& name = c.d.node(c.client_ids[k]).name;
    const auto& log = c.txn_logs.at(c.client_ids[k]);
    const auto& recs = c.clients[k]->records();
    if (log.size() != recs.size()) {
      h.input_problems.push_back(name + ": " + std::to_string(recs.size()) + " records but its txn sink received " +
                                 std::to_string(log.size()) + " transactions");
      continue;
    }
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].txn().txn_id() != recs[i].txn_id || log[i].committed() != recs[i].committed) {
        h.input_problems.push_back(name + ": record " + std::to_string(i) + " is txn " +
                                   std::to_string(recs[i].txn_id) + ", its txn sink received txn " +
                                   std::to_string(log[i].txn().txn_id()) + " there");
        continue;
      }
      h.txns.push_back({name, &log[i], recs[i].outputs});
    }
  }
  return h;
}

// Runs the history checker (history_check.h) on a finished cluster and adds a
// gtest failure per violation.
inline void check_history(const SimCluster& c) {
  report_history_failures(check_histories(*c.w, c.d.n_shards(), history_of(c)), c.d.mode);
}

// ===== HISTORY CHECKER HOOK =============================================
// Checks that run after every run_and_check(). The protocol-neutral history
// checker (check_history) is registered here; more can be added with
// post_run_checks().push_back. A check sees the finished cluster: every
// replica node (c.replicas, c.replica(shard, r)), the role nodes
// (c.net->node(id)), the clients' records (c.clients) and transactions
// (c.txn_logs) and the deployment, and reports with gtest assertions. A
// protocol-specific check returns early for other modes (c.d.mode).
using PostRunCheck = std::function<void(const SimCluster&)>;
inline std::vector<PostRunCheck>& post_run_checks() {
  static std::vector<PostRunCheck> checks{check_history};
  return checks;
}

// A round staged across a seal at shard 0: its followers replaced by stand-ins `r1` and `r2`, replica 0 sealed in
// epoch 1 (as a restarted replica 2's Seal would), then `t` submitted to it as transaction 5 by client 0 (a probe)
// at 50 ms, and the cluster run until `until`. The probe has the reply, if any.
inline ProbeClient* stage_across_a_seal(SimCluster& c, std::unique_ptr<Node> r1, std::unique_ptr<Node> r2,
                                        const TxnRequest& t, TimeUs until) {
  const NodeId client = c.d.clients().front();  // homed at shard 0
  ProbeClient* pc = c.attach_probe(client);
  c.net->add(c.d.replica_id(0, 1), std::move(r1));
  c.net->add(c.d.replica_id(0, 2), std::move(r2));
  c.net->start();
  std::string record;
  c.replica(0, 0)->seal(1, &record);
  c.net->run_until(50'000);
  Envelope e;
  *e.mutable_submit()->mutable_txn() = t;
  e.mutable_submit()->mutable_txn()->set_txn_id(5);
  e.mutable_submit()->set_attempt(1);
  c.net->send(client, c.d.replica_id(0, 0), e);
  c.net->run_until(until);
  return pc;
}

struct RunCounts {
  uint64_t irt = 0, crt = 0, given_up = 0;
};
inline RunCounts count_records(const SimCluster& c) {
  RunCounts k;
  for (auto* cl : c.clients)
    for (const auto& r : cl->records()) {
      if (!r.committed) ++k.given_up;
      else if (r.crt) ++k.crt;
      else ++k.irt;
    }
  return k;
}

// Runs a cluster built with clients to the end and checks what every protocol
// owes: every client finishes with every transaction committed, no node is
// left with unfinished work, the replicas of each shard end identical, no
// message was rejected or lost; then the post-run checks (the history checker:
// orders, atomicity, serializability, serial replay).
inline void run_and_check(SimCluster& c) {
  c.net->start();
  ASSERT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 120'000'000))
      << c.d.mode << ": clients did not finish";
  c.net->run_until(c.net->now() + 3'000'000);  // backups finish executing
  RunCounts k = count_records(c);
  EXPECT_GT(k.irt, 0u) << c.d.mode;
  EXPECT_GT(k.crt, 0u) << c.d.mode;
  EXPECT_EQ(k.given_up, 0u) << c.d.mode << ": transactions given up";
  for (const auto& n : c.d.nodes)
    EXPECT_TRUE(c.net->node(n.id)->idle()) << c.d.mode << ": " << n.name << " left work behind";
  for (uint32_t s = 0; s < c.d.n_shards(); ++s)
    for (uint32_t r = 1; r < c.d.replicas; ++r)
      EXPECT_EQ(c.replica(s, 0)->store().digest(), c.replica(s, r)->store().digest())
          << c.d.mode << ": shard " << s << " replica " << r << " differs from replica 0";
  EXPECT_EQ(c.net->dropped(), 0u) << c.d.mode << ": messages to nodes that do not exist";
  for (const auto& l : c.net->logs()) ADD_FAILURE() << c.d.mode << ": unexpected log: " << l;
  for (const auto& check : post_run_checks()) check(c);
}

}  // namespace txn::test
