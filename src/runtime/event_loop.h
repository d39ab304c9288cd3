// Runs one Node on one thread: inbox messages (pushed by the transport's
// threads) and a steady-clock timer heap. RealEnv is the Env it hands the node.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <tuple>
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
  EventLoop(const Deployment& d, NodeId self);
  // Where the env's outgoing messages go (normally Transport::send).
  void set_sender(Sender s) { sender_ = std::move(s); }
  // Thread-safe: queue an incoming message for the node.
  void post(Envelope&& m);
  // Start the node and process events until should_stop() returns true
  // (checked after every batch of events and at least every 20 ms).
  void run(Node& node, const std::function<bool()>& should_stop);
  Env& env() { return *env_; }

 private:
  friend class RealEnv;
  using Timer = std::tuple<TimeUs, uint64_t, uint64_t>;  // (deadline, seq, id)
  const Deployment& d_;
  NodeId self_;
  Sender sender_;
  std::unique_ptr<RealEnv> env_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Envelope> inbox_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;  // loop thread only
  uint64_t timer_seq_ = 0;
};

}  // namespace txn::runtime
