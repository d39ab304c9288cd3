#include "runtime/event_loop.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "runtime/clock.h"

namespace txn::runtime {
namespace {
constexpr TimeUs kMaxSleepUs = 20'000;   // should_stop() is checked at least this often

TimeUs wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

RealEnv::RealEnv(const Deployment& d, NodeId self, EventLoop& loop)
    : d_(d), self_(self), loop_(loop), rng_(d.seed ^ self) {}

TimeUs RealEnv::now_us() { return wall_us(); }

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
    : d_(d), self_(self), env_(std::make_unique<RealEnv>(d, self, *this)) {
  // steady_clock is CLOCK_MONOTONIC on Linux: due times are absolute timerfd times.
  tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (tfd_ < 0) throw std::runtime_error(std::string("timerfd_create: ") + std::strerror(errno));
}

EventLoop::~EventLoop() {
  if (tfd_ >= 0) close(tfd_);
}

void EventLoop::arm(TimeUs at) {
  armed_ = at;
  itimerspec its{};
  at = std::max<TimeUs>(at, 1);  // 0 would disarm
  its.it_value.tv_sec = at / 1'000'000;
  its.it_value.tv_nsec = (at % 1'000'000) * 1000;
  timerfd_settime(tfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

void EventLoop::post(Envelope&& m, TimeUs due_us) {
  std::lock_guard<std::mutex> g(mu_);
  inbox_.emplace(std::make_pair(due_us, inbox_seq_++), std::move(m));
  if (sleeping_ && due_us < armed_) arm(due_us);  // moves the wake-up, wakes nobody now
}

void EventLoop::answer_probe(const Envelope& m) {
  Envelope r;
  r.set_from(self_);
  r.set_to(m.from());
  r.set_sent_us(wall_us());
  r.mutable_probe_reply()->set_seq(m.probe().seq());
  r.mutable_probe_reply()->set_sent_us(m.probe().sent_us());
  if (sender_) sender_(std::move(r));
}

void EventLoop::run(Node& node, const std::function<bool()>& should_stop) {
  Env& env = *env_;
  node.start(env);
  std::vector<Envelope> batch;
  while (!should_stop()) {
    TimeUs now = steady_us();
    {
      std::lock_guard<std::mutex> g(mu_);
      sleeping_ = false;
      while (!inbox_.empty() && inbox_.begin()->first.first <= now) {
        batch.push_back(std::move(inbox_.begin()->second));
        inbox_.erase(inbox_.begin());
      }
    }
    for (const auto& m : batch) {
      if (m.has_probe()) {  // RTT self-test: answered by the runtime, not the node
        answer_probe(m);
        continue;
      }
      try {
        node.on_message(env, m);
      } catch (const BadMessage& e) {
        ++rejected_;
        env.log("bad message from " + d_.node(m.from()).name + ": " + e.what());
      }
    }
    const bool worked = !batch.empty();
    batch.clear();
    now = steady_us();
    bool fired = false;
    while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
      uint64_t id = std::get<2>(timers_.top());
      timers_.pop();
      node.on_timer(env, id);
      fired = true;
    }
    if (worked || fired) continue;  // what they did may be due already
    TimeUs wake = now + kMaxSleepUs;
    if (!timers_.empty()) wake = std::min(wake, std::get<0>(timers_.top()));
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!inbox_.empty()) wake = std::min(wake, inbox_.begin()->first.first);
      if (wake <= steady_us()) continue;
      arm(wake);
      sleeping_ = true;
    }
    uint64_t expirations;
    while (read(tfd_, &expirations, sizeof expirations) < 0 && errno == EINTR) {
      if (should_stop()) break;  // a signal (SIGTERM/SIGINT) interrupted the wait
    }
  }
}

}  // namespace txn::runtime
