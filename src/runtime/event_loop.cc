#include "runtime/event_loop.h"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
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

TimeUs RealEnv::now_us() {
  const TimeUs now = wall_us();
  if (d_.faults.clocks.empty()) return now;
  const TimeUs zero = loop_.zero_wall_.get();
  return zero == kNoTime ? now : now + d_.faults.clock_shift(self_, now - zero);
}

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
  channels_.set_faults(&d_.faults, &zero_mono_);
}

EventLoop::~EventLoop() = default;

void EventLoop::set_load_start(TimeUs wall) {
  // The steady clock's reading at that wall time: both read now, the difference carried over.
  zero_mono_.set(wall - wall_us() + steady_us());
  zero_wall_.set(wall);
}

TimeUs EventLoop::min_incoming_delay_us() const {
  const LinkModel& m = d_.link;
  if (m.mechanism != "app") return 0;
  std::vector<bool> here(d_.regions, false), there(d_.regions, false);
  for (NodeId n = 0; n < d_.nodes.size(); ++n) (hosts(n) ? here : there)[d_.node(n).region] = true;
  TimeUs least = INT64_MAX;
  for (uint32_t a = 0; a < there.size(); ++a) {
    if (!there[a]) continue;
    for (uint32_t b = 0; b < here.size(); ++b) {
      if (!here[b]) continue;
      // A jittered (cross-region) delay is a normal sample clipped at 0: no bound above 0.
      least = std::min(least, m.jitter_ms > 0 && a != b ? TimeUs{0} : m.one_way_us(a, b));
    }
  }
  return least == INT64_MAX ? 0 : least;
}

void EventLoop::wake_on_signals(std::vector<int> sigs, std::function<void(int)> on_signal) {
  wake_signals_ = std::move(sigs);
  on_signal_ = std::move(on_signal);
}

void EventLoop::post(Envelope&& m, TimeUs due_us) {
  std::lock_guard<std::mutex> g(mu_);
  inbox_.emplace(std::make_pair(due_us, inbox_seq_++), std::move(m));
  // Earlier than the loop's wait ends: end it (the eventfd), so the loop waits again, until this one is due. From
  // the loop's own thread (a transport on its reactor) there is nothing to end: the loop looks at its inbox as soon
  // as the handler that posted returns.
  const TimeUs at = message_wake(due_us);
  if (sleeping_ && at < armed_ && !(in_run_ && loop_thread_ == std::this_thread::get_id())) {
    armed_ = at;   // one wake is enough until the loop waits again
    reactor_.wake();
  }
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

TimeUs EventLoop::next_wake() {
  const TimeUs now = steady_us();
  TimeUs wake = now + max_sleep_us_;
  if (!timers_.empty()) wake = std::min(wake, on_grid(std::get<0>(timers_.top())));
  std::lock_guard<std::mutex> g(mu_);
  // The end of the grid cell that holds a message's time less half a cell: it arrives half a cell early at most
  // and late by less, no later on average than without a grid; a timer's, of its own time.
  if (!inbox_.empty()) wake = std::min(wake, message_wake(inbox_.begin()->first.first));
  return std::max(wake, now);
}

void EventLoop::run(const std::vector<Node*>& nodes, const std::function<bool()>& should_stop) {
  if (nodes.size() != local_.size()) throw std::runtime_error("event loop: one node per local id expected");
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->start(*envs_[i]);
  if (flusher_) flusher_();
  // The wake signals stay blocked (the caller blocks them in every thread; here too, to be sure) and are read from
  // a signalfd while the loop runs.
  sigset_t wake, before;
  sigemptyset(&wake);
  for (int sig : wake_signals_) sigaddset(&wake, sig);
  pthread_sigmask(SIG_BLOCK, &wake, &before);
  int sfd = -1;
  if (!wake_signals_.empty()) {
    sfd = signalfd(-1, &wake, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
    reactor_.watch(sfd, EPOLLIN, [this, sfd](uint32_t) {
      signalfd_siginfo si;
      while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
        if (on_signal_) on_signal_(static_cast<int>(si.ssi_signo));
    }, /*control=*/true);
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    in_run_ = true;
    loop_thread_ = std::this_thread::get_id();
  }
  std::vector<Envelope> batch;
  while (!should_stop()) {
    TimeUs now = steady_us();
    {
      std::lock_guard<std::mutex> g(mu_);
      sleeping_ = false;
      // A message is due half a cell either side of its time (timers below: at their time, never early).
      while (!inbox_.empty() && inbox_.begin()->first.first - grid_us_ / 2 <= now) {
        batch.push_back(std::move(inbox_.begin()->second));
        inbox_.erase(inbox_.begin());
      }
    }
    ++rounds_;
    bool worked = !batch.empty();
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
    batch.clear();
    now = steady_us();
    while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
      const uint32_t i = std::get<2>(timers_.top());
      const uint64_t id = std::get<3>(timers_.top());
      timers_.pop();
      if (!worked) ++timer_rounds_;
      worked = true;
      nodes[i]->on_timer(*envs_[i], id);
    }
    if (!worked) ++empty_rounds_;
    if (flusher_) flusher_();   // what this round sent to other processes, one batch per destination
    // Wait (or, with something due already, only look) for the next due message or timer, a socket, a signal:
    // the reactor runs what its descriptors and timers have, then the loop looks at its inbox again.
    TimeUs wake = next_wake();
    bool quiet = false;
    if (quiet_us_ > 0) {
      // Quiet: what the sockets hold was sent after the last look at them, and is due no earlier than that plus the
      // least delay into this process; read at this wake-up, it is delivered half a cell late at most.
      if (wake > reactor_.polled_at() + quiet_us_ && wake <= steady_us() + quiet_us_) {
        reactor_.wait(0);   // read the sockets now, so that the wait below may leave them
        wake = next_wake();
      }
      quiet = wake <= reactor_.polled_at() + quiet_us_;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      // Under the lock that post() takes: what another thread posted since next_wake() is counted here, what it
      // posts from now on ends the wait if it is due sooner (the eventfd ends quiet waits too).
      if (!inbox_.empty()) wake = std::max(std::min(wake, message_wake(inbox_.begin()->first.first)), steady_us());
      armed_ = wake;
      sleeping_ = true;
    }
    if (quiet) {
      ++quiet_waits_;
      reactor_.wait_quiet(wake);
    } else {
      reactor_.wait(wake);
    }
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    sleeping_ = false;
    in_run_ = false;
  }
  if (flusher_) flusher_();   // what the last round sent (a transport on the reactor writes at once)
  reactor_.wait(0);           // and what is ready
  if (sfd >= 0) {
    reactor_.forget(sfd);
    ::close(sfd);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace txn::runtime
