// What the roles of one protocol node share. A replica node of every built protocol plays two roles, each a class
// of its own: the coordinator of the transactions its clients submit, and the site that orders and executes its
// shard's transactions; the node owns both and routes each message to its role (docs/adding-a-protocol.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "config.h"
#include "protocol.h"
#include "self_queue.h"
#include "workload.h"

namespace txn {

struct RoleContext {
  RoleContext(const Deployment& d, NodeId self, const Workload& w, SelfQueue& q)
      : d_(d), self_(self), me_(d.node(self)), w_(w), q_(q) {}
  // To another node, or (to this node) queued and handled once the current message is done: no network.
  void post(Env& env, NodeId to, Envelope msg) { q_.post(env, to, std::move(msg)); }
  // A client submits to the handler (replica 0) of its transaction's home shard: BadMessage when that is not this.
  void check_submitted_here(const TxnRequest& t) const {
    if (me_.replica != 0 || t.home_shard() != me_.shard)
      throw BadMessage("txn " + std::to_string(t.txn_id()) + " submitted to " + me_.name +
                       ", not the handler of its home shard " + std::to_string(t.home_shard()));
  }

  const Deployment& d_;
  const NodeId self_;
  const NodeInfo& me_;
  const Workload& w_;
  SelfQueue& q_;
};

// A replica node of two roles: it owns them (a Site that orders and executes, a Coordinator of its clients'
// transactions, both constructed as (deployment, self, workload, options, queue)) and the queue they send through,
// and routes each message to one of them (route(), the protocol's). Messages a role queues to this node are routed
// once the current one is done. Protocols with timers or roles that know each other (DAST) write their own.
template <class Options, class Site, class Coordinator>
class TwoRoleReplica : public ReplicaNode {
 public:
  TwoRoleReplica(const Deployment& d, NodeId self, const Workload& w)
      : opts_(d), self_q_(self), site_(d, self, w, opts_, self_q_), coord_(d, self, w, opts_, self_q_) {}
  void start(Env&) override {}
  void on_message(Env& env, Envelope& msg) override {
    route(env, msg);
    self_q_.drain(env, [&](Envelope& m) { route(env, m); });
  }
  void on_timer(Env&, uint64_t) override {}
  bool idle() const override { return site_.idle() && coord_.idle(); }
  const ShardExecutor& executor() const override { return site_.executor(); }
  // Each role adds its own counters (`add_counters`); their names differ.
  std::map<std::string, int64_t> counters() const override {
    std::map<std::string, int64_t> c;
    site_.add_counters(c);
    coord_.add_counters(c);
    return c;
  }

 protected:
  virtual void route(Env& env, Envelope& msg) = 0;

  const Options opts_;
  SelfQueue self_q_;
  Site site_;
  Coordinator coord_;
};

}  // namespace txn
