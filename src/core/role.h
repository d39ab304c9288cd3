// What the roles of one protocol node share. A replica node of DAST or Janus plays two roles, each a class of its
// own: the coordinator of the transactions its clients submit, and the site that orders and executes its shard's
// transactions; the node owns both and routes each message to its role (docs/adding-a-protocol.md).
#pragma once
#include "config.h"
#include "self_queue.h"
#include "workload.h"

namespace txn {

struct RoleContext {
  RoleContext(const Deployment& d, NodeId self, const Workload& w, SelfQueue& q)
      : d_(d), self_(self), me_(d.node(self)), w_(w), q_(q) {}
  // To another node, or (to this node) queued and handled once the current message is done: no network.
  void post(Env& env, NodeId to, Envelope msg) { q_.post(env, to, std::move(msg)); }

  const Deployment& d_;
  const NodeId self_;
  const NodeInfo& me_;
  const Workload& w_;
  SelfQueue& q_;
};

}  // namespace txn
