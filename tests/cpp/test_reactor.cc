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

// A quiet wait ends at its deadline, a control fd or a post, never at another fd; then it looks at every fd once,
// without waiting, and polled_at() is the time of that look.
TEST(Reactor, AQuietWaitLeavesSocketsUntilItEndsThenReadsThem) {
  Reactor r;
  int sock[2], ctl[2];
  ASSERT_EQ(pipe(sock), 0);
  ASSERT_EQ(pipe(ctl), 0);
  std::vector<TimeUs> read_at;
  ASSERT_TRUE(r.watch(sock[0], EPOLLIN, [&](uint32_t) {
    char c;
    ASSERT_EQ(read(sock[0], &c, 1), 1);
    read_at.push_back(steady_us());
  }));
  int controls = 0;
  ASSERT_TRUE(r.watch(ctl[0], EPOLLIN, [&](uint32_t) {
    char c;
    ASSERT_EQ(read(ctl[0], &c, 1), 1);
    ++controls;
  }, /*control=*/true));
  ASSERT_EQ(write(sock[1], "a", 1), 1);
  TimeUs t0 = steady_us();
  EXPECT_EQ(r.wait_quiet(t0 + 20'000), 1);
  const TimeUs t1 = steady_us();
  EXPECT_GE(t1 - t0, 20'000) << "a readable socket ended a quiet wait";
  ASSERT_EQ(read_at.size(), 1u);
  EXPECT_GE(read_at[0] - t0, 20'000) << "read before the wait ended";
  EXPECT_GE(r.polled_at(), t0 + 20'000);
  EXPECT_LE(r.polled_at(), read_at[0]);
  // A control fd written from another thread ends it early.
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(write(ctl[1], "b", 1), 1);
  });
  t0 = steady_us();
  r.wait_quiet(t0 + 2'000'000);
  other.join();
  EXPECT_EQ(controls, 1);
  EXPECT_LT(steady_us() - t0, 1'000'000) << "a control fd did not end the quiet wait";
  // A plain wait ends at the socket; a wait that does not wait moves polled_at, a blocking one does not.
  ASSERT_EQ(write(sock[1], "c", 1), 1);
  t0 = steady_us();
  EXPECT_EQ(r.wait(t0 + 2'000'000), 1);
  EXPECT_LT(steady_us() - t0, 1'000'000);
  EXPECT_LT(r.polled_at(), t0);
  EXPECT_EQ(r.wait(0), 0);
  EXPECT_GE(r.polled_at(), t0);
  // A socket re-watched as control ends quiet waits too; forgotten, it is in neither set.
  ASSERT_TRUE(r.watch(sock[0], EPOLLIN, [&](uint32_t) {
    char c;
    ASSERT_EQ(read(sock[0], &c, 1), 1);
    read_at.push_back(steady_us());
  }, /*control=*/true));
  ASSERT_EQ(write(sock[1], "d", 1), 1);
  t0 = steady_us();
  r.wait_quiet(t0 + 2'000'000);
  EXPECT_LT(steady_us() - t0, 1'000'000);
  EXPECT_EQ(read_at.size(), 3u);
  r.forget(sock[0]);
  ASSERT_EQ(write(sock[1], "e", 1), 1);
  t0 = steady_us();
  EXPECT_EQ(r.wait_quiet(t0 + 10'000), 0);
  EXPECT_EQ(read_at.size(), 3u);
  for (int fd : {sock[0], sock[1], ctl[0], ctl[1]}) close(fd);
}
