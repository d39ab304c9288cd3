#include "runtime/event_loop.h"
#include "runtime/clock.h"

#include <chrono>
#include <cstdio>

namespace txn::runtime {

RealEnv::RealEnv(const Deployment& d, NodeId self, EventLoop& loop)
    : d_(d), self_(self), loop_(loop), rng_(d.seed ^ self) {}

TimeUs RealEnv::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TimeUs RealEnv::mono_us() { return steady_us(); }

void RealEnv::send(NodeId to, Envelope msg) {
  msg.set_from(self_);
  msg.set_to(to);
  msg.set_sent_us(now_us());
  if (loop_.sender_) loop_.sender_(std::move(msg));
}

void RealEnv::set_timer(uint64_t id, TimeUs delay_us) {
  loop_.timers_.emplace(steady_us() + std::max<TimeUs>(0, delay_us), loop_.timer_seq_++, id);
}

void RealEnv::log(const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", d_.node(self_).name.c_str(), line.c_str());
}

EventLoop::EventLoop(const Deployment& d, NodeId self)
    : d_(d), self_(self), env_(std::make_unique<RealEnv>(d, self, *this)) {}

void EventLoop::post(Envelope&& m) {
  std::lock_guard<std::mutex> g(mu_);
  inbox_.push_back(std::move(m));
  if (inbox_.size() == 1) cv_.notify_one();
}

void EventLoop::run(Node& node, const std::function<bool()>& should_stop) {
  Env& env = *env_;
  node.start(env);
  std::deque<Envelope> batch;
  while (!should_stop()) {
    TimeUs wake = steady_us() + 20000;
    if (!timers_.empty()) wake = std::min(wake, std::get<0>(timers_.top()));
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_until(lk, std::chrono::steady_clock::time_point(std::chrono::microseconds(wake)),
                     [&] { return !inbox_.empty(); });
      batch.swap(inbox_);
    }
    for (const auto& m : batch) {
      try {
        node.on_message(env, m);
      } catch (const BadMessage& e) {
        env.log("bad message from " + d_.node(m.from()).name + ": " + e.what());
      }
    }
    batch.clear();
    TimeUs now = steady_us();
    while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
      uint64_t id = std::get<2>(timers_.top());
      timers_.pop();
      node.on_timer(env, id);
    }
  }
}

}  // namespace txn::runtime
