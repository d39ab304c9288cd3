// The one wait of an engine process's thread (docs/efficiency.md): an epoll set of file descriptors (sockets, a
// signalfd, an eventfd for other threads), timers on the steady clock, and a deadline, all in one epoll_pwait2 with
// a nanosecond timeout. No timerfd and no re-registration per wait: a wake-up costs that one system call plus the
// reads and writes it does.
//
// Threads: everything is called from the thread that runs wait(), except post() and wake(), which any thread may
// call (a Mailbox; it outlives the reactor for a thread that still holds it).
//
// Descriptors are level-triggered: a handler that leaves data unread is called again on the next wait.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/node.h"

namespace txn::runtime {

class Reactor {
 public:
  using Handler = std::function<void(uint32_t events)>;
  static constexpr TimeUs kForever = INT64_MAX;

  // Throws std::runtime_error when epoll or eventfd cannot be had.
  Reactor();
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // Watch `fd` for `events` (EPOLLIN, EPOLLOUT, ...); the handler gets what happened. One handler per fd: a second
  // watch() of the same fd replaces it. False (errno set) when epoll refuses the fd. A `control` fd (the reactor's
  // eventfd, a signalfd) also ends a quiet wait; the others (sockets) are looked at only after one.
  bool watch(int fd, uint32_t events, Handler h, bool control = false);
  void change(int fd, uint32_t events);   // the events of a watched fd
  void forget(int fd);                    // before the fd is closed; its handler is not called again

  // Run `f` once the steady clock reaches `at_us` (at a wait). The id cancels it.
  uint64_t at(TimeUs at_us, std::function<void()> f);
  void cancel(uint64_t id);
  TimeUs next_timer() const;   // the earliest pending timer, kForever without

  // Wait until `deadline_us` (steady clock; 0 or less: do not wait), an fd event, a due timer or a post, then run
  // the handlers of what happened: fds, then due timers, then posts. Returns the number run.
  int wait(TimeUs deadline_us);
  // The same, but only the control fds, the timers and posts end the wait; then every fd is looked at without
  // waiting (so what a socket got meanwhile is read now, once). The event loop waits so when nothing a socket
  // may bring can fall due before the deadline (EventLoop::set_quiet_horizon_us).
  int wait_quiet(TimeUs deadline_us);
  // The steady clock just before the last look at every fd that did not wait (wait(t) with t in the past, or
  // wait_quiet's look): anything a socket holds that was not read then arrived after it. 0: none yet.
  TimeUs polled_at() const { return polled_at_; }

  // Thread-safe: run `f` on the reactor's thread at its next wait (dropped if the reactor is gone by then).
  void post(std::function<void()> f);
  // Thread-safe: end the wait in progress (or the next) at once.
  void wake();

  struct Mailbox;
  // For another thread that may outlive the reactor: posts through it are dropped once the reactor is gone.
  std::shared_ptr<Mailbox> mailbox() const { return box_; }
  static void post(const std::shared_ptr<Mailbox>& box, std::function<void()> f);

 private:
  struct Watch {
    uint32_t gen;   // events of an earlier watch of the same fd number are not this one's
    Handler h;
    bool control;
  };
  uint32_t gen_ = 0;
  int ep_ = -1;
  int qep_ = -1;                 // the control fds only: a quiet wait's set
  TimeUs polled_at_ = 0;
  int run_ready(int ep, TimeUs until);   // one epoll_pwait2 on `ep` until `until` (<= now: no wait), its handlers
  int run_timers_and_posts();
  std::shared_ptr<Mailbox> box_;
  std::unordered_map<int, std::shared_ptr<Watch>> watches_;
  using Timer = std::tuple<TimeUs, uint64_t>;   // (due, id)
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::unordered_map<uint64_t, std::function<void()>> timer_fns_;   // pending (not cancelled) timers
  uint64_t next_id_ = 1;
  void drain_box();
};

}  // namespace txn::runtime
