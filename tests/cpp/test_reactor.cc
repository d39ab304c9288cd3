// The event loop's reactor (src/runtime/reactor.h): timers, descriptors, posts from other threads.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/clock.h"
#include "runtime/reactor.h"

using txn::TimeUs;
using txn::runtime::Reactor;
using txn::runtime::steady_us;

// Timers run in due order, not before they are due, and a cancelled one never runs; a wait with nothing to do
// ends at its deadline.
TEST(Reactor, TimersRunInDueOrderAndCancelledOnesNever) {
  Reactor r;
  std::vector<int> ran;
  const TimeUs t0 = steady_us();
  r.at(t0 + 6'000, [&] { ran.push_back(3); });
  r.at(t0 + 2'000, [&] { ran.push_back(1); });
  const uint64_t gone = r.at(t0 + 3'000, [&] { ran.push_back(99); });
  r.at(t0 + 4'000, [&] { ran.push_back(2); });
  r.cancel(gone);
  EXPECT_EQ(r.next_timer(), t0 + 2'000);
  while (ran.size() < 3 && steady_us() - t0 < 2'000'000) r.wait(Reactor::kForever);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(steady_us() - t0, 6'000);
  const TimeUs w0 = steady_us();
  EXPECT_EQ(r.wait(w0 + 3'000), 0);
  EXPECT_GE(steady_us() - w0, 3'000);
}

// A watched descriptor's handler runs when it is readable, again while data is left (level-triggered), and never
// after it is forgotten, even from inside its own handler; a watch of the same fd number replaces the old one.
TEST(Reactor, DescriptorHandlersAreLevelTriggeredAndForgettable) {
  Reactor r;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  int calls = 0;
  ASSERT_TRUE(r.watch(p[0], EPOLLIN, [&](uint32_t ev) {
    EXPECT_TRUE(ev & EPOLLIN);
    ++calls;
    char c;
    ASSERT_EQ(read(p[0], &c, 1), 1);   // one byte per call: the rest stays readable
  }));
  ASSERT_EQ(write(p[1], "ab", 2), 2);
  EXPECT_EQ(r.wait(0), 1);
  EXPECT_EQ(r.wait(0), 1);
  EXPECT_EQ(r.wait(0), 0);
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(r.watch(p[0], EPOLLIN, [&](uint32_t) {
    calls += 10;
    r.forget(p[0]);   // from inside its own handler
  }));
  ASSERT_EQ(write(p[1], "cd", 2), 2);
  r.wait(0);
  r.wait(0);
  EXPECT_EQ(calls, 12) << "the replacing handler ran once, then was forgotten";
  close(p[0]);
  close(p[1]);
}

// Another thread's post ends a wait with no deadline and runs on the reactor's thread; posts to a mailbox whose
// reactor is gone are dropped.
TEST(Reactor, PostsFromAnotherThreadEndAWaitAndRunOnTheReactorsThread) {
  auto r = std::make_unique<Reactor>();
  std::atomic<bool> ran{false};
  std::thread::id where;
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r->post([&] {
      where = std::this_thread::get_id();
      ran = true;
    });
  });
  const TimeUs t0 = steady_us();
  while (!ran && steady_us() - t0 < 5'000'000) r->wait(Reactor::kForever);
  other.join();
  EXPECT_TRUE(ran);
  EXPECT_EQ(where, std::this_thread::get_id());
  auto box = r->mailbox();
  r.reset();
  bool late = false;
  Reactor::post(box, [&] { late = true; });   // nobody runs it, and nothing breaks
  EXPECT_FALSE(late);
}
