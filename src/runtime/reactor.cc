#include "runtime/reactor.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/clock.h"

namespace txn::runtime {

// What other threads reach: posted work and the eventfd that ends a wait. Shared, so that a thread holding it may
// post after the reactor is gone (then nobody runs it).
struct Reactor::Mailbox {
  std::mutex mu;
  std::vector<std::function<void()>> posted;
  int efd = -1;
  bool open = true;
  bool signalled = false;   // the eventfd holds a count not yet read
  ~Mailbox() {
    if (efd >= 0) ::close(efd);
  }
  void wake_locked() {
    if (signalled || efd < 0) return;
    signalled = true;
    const uint64_t one = 1;
    if (::write(efd, &one, sizeof one) < 0) { /* the count is at its limit: the wait ends anyway */ }
  }
};

Reactor::Reactor() : box_(std::make_shared<Mailbox>()) {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  qep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0 || qep_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
  box_->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (box_->efd < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  const int efd = box_->efd;
  watch(efd, EPOLLIN, [this, efd](uint32_t) {
    uint64_t n;
    if (::read(efd, &n, sizeof n) < 0) { /* nothing to read: a spurious event */ }
    std::lock_guard<std::mutex> g(box_->mu);
    box_->signalled = false;
  }, /*control=*/true);
}

Reactor::~Reactor() {
  {
    std::lock_guard<std::mutex> g(box_->mu);
    box_->open = false;
    box_->posted.clear();
  }
  ::close(ep_);
  ::close(qep_);
}

namespace {
uint64_t tag(uint32_t gen, int fd) { return uint64_t{gen} << 32 | static_cast<uint32_t>(fd); }
}  // namespace

bool Reactor::watch(int fd, uint32_t events, Handler h, bool control) {
  const uint32_t gen = ++gen_;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag(gen, fd);
  auto it = watches_.find(fd);
  const bool known = it != watches_.end();
  const bool was_control = known && it->second->control;
  if (epoll_ctl(ep_, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  if (control && epoll_ctl(qep_, was_control ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int e = errno;
    if (!known) epoll_ctl(ep_, EPOLL_CTL_DEL, fd, &ev);
    errno = e;
    return false;
  }
  if (!control && was_control) epoll_ctl(qep_, EPOLL_CTL_DEL, fd, &ev);
  watches_[fd] = std::make_shared<Watch>(Watch{gen, std::move(h), control});
  return true;
}

void Reactor::change(int fd, uint32_t events) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag(it->second->gen, fd);
  epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
  if (it->second->control) epoll_ctl(qep_, EPOLL_CTL_MOD, fd, &ev);
}

void Reactor::forget(int fd) {
  auto it = watches_.find(fd);
  if (it == watches_.end()) return;
  const bool control = it->second->control;
  watches_.erase(it);
  epoll_event ev{};
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, &ev);
  if (control) epoll_ctl(qep_, EPOLL_CTL_DEL, fd, &ev);
}

uint64_t Reactor::at(TimeUs at_us, std::function<void()> f) {
  const uint64_t id = next_id_++;
  timers_.emplace(at_us, id);
  timer_fns_.emplace(id, std::move(f));
  return id;
}

void Reactor::cancel(uint64_t id) { timer_fns_.erase(id); }

TimeUs Reactor::next_timer() const {
  // Cancelled timers stay in the heap until they come up: an early wake-up at worst.
  return timers_.empty() ? kForever : std::get<0>(timers_.top());
}

void Reactor::post(std::function<void()> f) { post(box_, std::move(f)); }

void Reactor::post(const std::shared_ptr<Mailbox>& box, std::function<void()> f) {
  std::lock_guard<std::mutex> g(box->mu);
  if (!box->open) return;
  box->posted.push_back(std::move(f));
  box->wake_locked();
}

void Reactor::wake() {
  std::lock_guard<std::mutex> g(box_->mu);
  box_->wake_locked();
}

void Reactor::drain_box() {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> g(box_->mu);
    work.swap(box_->posted);
  }
  for (auto& f : work) f();
}

int Reactor::run_ready(int ep, TimeUs until) {
  // Timeouts as exact as the kernel's hrtimers allow: the thread's default slack (50 us) would make every emulated
  // delay late by up to that much; with 1 ns, a wait's slack is a thousandth of its length (select's rule).
  thread_local bool slack_set = false;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    slack_set = true;
  }
  const TimeUs now = steady_us();
  timespec ts{0, 0};
  if (until > now) {
    const TimeUs d = until - now;
    ts.tv_sec = d / 1'000'000;
    ts.tv_nsec = (d % 1'000'000) * 1000;
  } else if (ep == ep_) {
    polled_at_ = now;   // a look at every fd, without waiting
  }
  epoll_event evs[64];
  const int n = epoll_pwait2(ep, evs, 64, until == kForever ? nullptr : &ts, nullptr);
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = static_cast<int>(evs[i].data.u64 & 0xffffffffu);
    auto it = watches_.find(fd);
    // Forgotten by an earlier handler of this wait, or its number already reused by a new watch.
    if (it == watches_.end() || it->second->gen != evs[i].data.u64 >> 32) continue;
    std::shared_ptr<Watch> w = it->second;   // a handler may forget (and so free) itself
    w->h(evs[i].events);
    ++ran;
  }
  return ran;
}

int Reactor::run_timers_and_posts() {
  int ran = 0;
  const TimeUs now = steady_us();
  while (!timers_.empty() && std::get<0>(timers_.top()) <= now) {
    const uint64_t id = std::get<1>(timers_.top());
    timers_.pop();
    auto it = timer_fns_.find(id);
    if (it == timer_fns_.end()) continue;   // cancelled
    std::function<void()> f = std::move(it->second);
    timer_fns_.erase(it);
    f();
    ++ran;
  }
  drain_box();
  return ran;
}

int Reactor::wait(TimeUs deadline_us) {
  // Posted work needs no look here: a post leaves the eventfd readable until drain_box() has taken it.
  const int ran = run_ready(ep_, std::min(deadline_us, next_timer()));
  return ran + run_timers_and_posts();
}

int Reactor::wait_quiet(TimeUs deadline_us) {
  int ran = run_ready(qep_, std::min(deadline_us, next_timer()));
  ran += run_ready(ep_, 0);
  return ran + run_timers_and_posts();
}

}  // namespace txn::runtime
