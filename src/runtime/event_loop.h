// Runs one Node on one thread: incoming messages, each due at a steady-clock
// time (the transport's link emulation), and the node's timers. The thread
// sleeps on a timerfd set for the earliest of them, so a message costs one
// wake-up, at the moment it is due: a thread that posts one earlier than that
// moves the timer instead of waking the loop. RealEnv is the Env it hands the
// node; RTT probes are answered here, when due, without the node.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/config.h"

namespace txn::runtime {

class EventLoop;

class RealEnv final : public Env {
 public:
  RealEnv(const Deployment& d, NodeId self, EventLoop& loop);
  TimeUs now_us() override;    // wall clock, microseconds since the epoch
  TimeUs mono_us() override;   // steady clock
  void send(NodeId to, Envelope msg) override;
  void set_timer(uint64_t id, TimeUs delay_us) override;
  std::mt19937_64& rng() override { return rng_; }
  NodeId self() const override { return self_; }
  void log(const std::string& line) override;

 private:
  const Deployment& d_;
  NodeId self_;
  EventLoop& loop_;
  std::mt19937_64 rng_;
};

class EventLoop {
 public:
  using Sender = std::function<void(Envelope&&)>;
  EventLoop(const Deployment& d, NodeId self);   // throws std::runtime_error if no timerfd
  ~EventLoop();
  // Where the env's outgoing messages go (normally Transport::send).
  void set_sender(Sender s) { sender_ = std::move(s); }
  // Thread-safe: queue a message for the node, to be handled at `due_us`.
  void post(Envelope&& m, TimeUs due_us);
  // Start the node and process events until should_stop() returns true
  // (checked after every batch of events and at least every 20 ms).
  void run(Node& node, const std::function<bool()>& should_stop);
  Env& env() { return *env_; }
  // Messages the node rejected (BadMessage): logged and dropped.
  uint64_t rejected() const { return rejected_; }

 private:
  friend class RealEnv;
  using Timer = std::tuple<TimeUs, uint64_t, uint64_t>;  // (deadline, seq, id)
  void arm(TimeUs at);   // mu_ held
  void answer_probe(const Envelope& m);

  const Deployment& d_;
  NodeId self_;
  Sender sender_;
  std::unique_ptr<RealEnv> env_;
  int tfd_ = -1;
  std::mutex mu_;
  std::map<std::pair<TimeUs, uint64_t>, Envelope> inbox_;   // (due, arrival order)
  uint64_t inbox_seq_ = 0;
  bool sleeping_ = false;      // the loop waits on the timerfd
  TimeUs armed_ = 0;           // when the timerfd fires
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;  // loop thread only
  uint64_t timer_seq_ = 0;
  uint64_t rejected_ = 0;      // loop thread only
};

}  // namespace txn::runtime
