#include "runtime/event_loop.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
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
// In-process messages never reach a qdisc: under netem they get the delay the tc plan would have given them on the
// container's loopback (the same matrix), from the app model; with `none`, none.
LinkModel in_process(LinkModel m) {
  if (m.mechanism == "netem") m.mechanism = "app";
  return m;
}

TimeUs wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

RealEnv::RealEnv(const Deployment& d, NodeId self, uint32_t index, EventLoop& loop)
    : d_(d), self_(self), index_(index), loop_(loop), rng_(d.seed ^ self) {}

TimeUs RealEnv::now_us() { return wall_us(); }

TimeUs RealEnv::mono_us() { return steady_us(); }

void RealEnv::send(NodeId to, Envelope msg) {
  msg.set_from(self_);
  msg.set_to(to);
  msg.set_sent_us(now_us());
  loop_.route(std::move(msg));
}

void RealEnv::set_timer(uint64_t id, TimeUs delay_us) {
  loop_.timers_.emplace(steady_us() + std::max<TimeUs>(0, delay_us), loop_.timer_seq_++, index_, id);
}

void RealEnv::log(const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", d_.node(self_).name.c_str(), line.c_str());
}

EventLoop::EventLoop(const Deployment& d, std::vector<NodeId> local)
    : d_(d), local_(std::move(local)), index_(d.nodes.size(), kNone), channels_(in_process(d.link)),
      link_rng_(d.seed ^ 0x5bd1e995ull ^ (uint64_t{local_.empty() ? 0 : local_[0]} << 32)) {
  if (local_.empty()) throw std::runtime_error("an event loop needs at least one node");
  for (uint32_t i = 0; i < local_.size(); ++i) {
    index_.at(local_[i]) = i;
    envs_.push_back(std::make_unique<RealEnv>(d, local_[i], i, *this));
  }
  rejected_.assign(local_.size(), 0);
  // steady_clock is CLOCK_MONOTONIC on Linux: due times are absolute timerfd times.
  tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
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

void EventLoop::route(Envelope&& m) {
  const NodeId to = m.to();
  if (!hosts(to)) {
    ++remote_msgs_;
    if (sender_) sender_(std::move(m));
    return;
  }
  // The same delay, jitter and per-channel FIFO as the transport gives a message from another process.
  ++local_msgs_;
  const TimeUs due = channels_.due(d_, m.from(), to, steady_us(), link_rng_);
  std::lock_guard<std::mutex> g(mu_);   // the loop is awake: nothing to re-arm
  inbox_.emplace(std::make_pair(due, inbox_seq_++), std::move(m));
}

void EventLoop::answer_probe(const Envelope& m) {
  Envelope r;
  r.set_from(m.to());
  r.set_to(m.from());
  r.set_sent_us(wall_us());
  r.mutable_probe_reply()->set_seq(m.probe().seq());
  r.mutable_probe_reply()->set_sent_us(m.probe().sent_us());
  route(std::move(r));
}

void EventLoop::run(const std::vector<Node*>& nodes, const std::function<bool()>& should_stop) {
  if (nodes.size() != local_.size()) throw std::runtime_error("event loop: one node per local id expected");
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->start(*envs_[i]);
  if (flusher_) flusher_();
  // The mask the wait runs with: this thread's, less the signals that must end it.
  sigset_t wait_mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &wait_mask);
  for (int sig : wake_signals_) sigdelset(&wait_mask, sig);
  pollfd pfd{tfd_, POLLIN, 0};
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
    for (auto& m : batch) {
      if (m.has_probe()) {  // RTT self-test: answered by the runtime, not the node
        answer_probe(m);
        continue;
      }
      const uint32_t i = hosts(m.to()) ? index_[m.to()] : kNone;
      if (i == kNone) continue;  // the transport checks the destination; defensive
      try {
        nodes[i]->on_message(*envs_[i], m);
      } catch (const BadMessage& e) {
        ++rejected_[i];
        envs_[i]->log("bad message from " + d_.node(m.from()).name + ": " + e.what());
      }
    }
    const bool worked = !batch.empty();
    batch.clear();
    now = steady_us();
    bool fired = false;
    while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
      const uint32_t i = std::get<2>(timers_.top());
      const uint64_t id = std::get<3>(timers_.top());
      timers_.pop();
      nodes[i]->on_timer(*envs_[i], id);
      fired = true;
    }
    if (flusher_) flusher_();   // what this round sent to other processes, one batch per destination
    if (worked || fired) continue;  // what they did may be due already
    TimeUs wake = now + max_sleep_us_;
    if (!timers_.empty()) wake = std::min(wake, std::get<0>(timers_.top()));
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!inbox_.empty()) wake = std::min(wake, inbox_.begin()->first.first);
      if (wake <= steady_us()) continue;
      arm(wake);
      sleeping_ = true;
    }
    // Until the timer fires, or a signal (SIGTERM/SIGINT) arrives: should_stop() then sees it. Its expiration
    // is not read: arming the timer for the next wait (timerfd_settime) clears it.
    ppoll(&pfd, 1, nullptr, &wait_mask);
  }
  if (flusher_) flusher_();
}

}  // namespace txn::runtime
