// Messages a node sends to itself: queued and handled right after the message
// (or timer) being handled, without the network. For protocols whose replica
// is also a coordinator (DAST, Janus): it sends to "every replica of the
// shard", itself included, through one path.
#pragma once
#include <deque>
#include <functional>
#include <string>

#include "node.h"

namespace txn {

class SelfQueue {
 public:
  explicit SelfQueue(NodeId self) : self_(self) {}
  // Sends `msg` to `to`, or queues it when `to` is this node.
  void post(Env& env, NodeId to, Envelope msg) {
    if (to != self_) return env.send(to, std::move(msg));
    msg.set_from(self_);
    msg.set_to(self_);
    queue_.push_back(std::move(msg));
  }
  // Handles every queued message (a BadMessage is logged in one line and the
  // message dropped, as the runtime does). A call made while draining returns
  // at once: the outer call handles what was queued meanwhile.
  void drain(Env& env, const std::function<void(Envelope&)>& handle) {
    if (draining_) return;
    draining_ = true;
    while (!queue_.empty()) {
      Envelope m = std::move(queue_.front());
      queue_.pop_front();
      try {
        handle(m);
      } catch (const BadMessage& e) {
        env.log(std::string("bad local message: ") + e.what());
      }
    }
    draining_ = false;
  }

 private:
  NodeId self_;
  std::deque<Envelope> queue_;
  bool draining_ = false;
};

}  // namespace txn
