// txn-wakecost: what this host charges a process per wake-up before it does any work (docs/efficiency.md).
//
// An engine process at low load sleeps between messages: its waits end at a timer (a message or a timer falling
// due) or at a frame another process wrote. On a virtual machine, leaving the idle state and taking the interrupt
// that ends the wait can cost the woken process more than the work it then does, and no engine change moves that
// part. `make bench` runs this once and sets it beside each protocol's floor of wake-ups (txn-sim) to say what the
// host allows at that load. Two measurements, each of N waits about a gap apart, CPU by getrusage (user + system):
//   timer  epoll_pwait2 with a gap's timeout, on an epoll set whose one descriptor stays quiet;
//   frame  epoll_pwait2 without a timeout, ended by a byte that a second process writes over a Unix socket pair
//          after sleeping a gap (where the scheduler puts the two: on one CPU or on two, as the engine's are).
// Prints one JSON line: {"timer_wake_us": .., "frame_wake_us": .., "timer_wakes": .., "frame_wakes": .., ...}.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "core/usage.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "txn-wakecost: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

struct Result {
  double us_per_wake = 0;
  long wakes = 0;
};

// The waiting thread's CPU per wait and its sleeps (voluntary switches) since `u0`.
Result since(const txn::Usage& u0, long waits) {
  const txn::Usage u1 = txn::own_usage(RUSAGE_THREAD);
  return {(u1.cpu_s - u0.cpu_s) * 1e6 / static_cast<double>(waits), u1.voluntary_switches - u0.voluntary_switches};
}

// An epoll set watching one descriptor for input.
int watch_input(int fd) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  return ep;
}

timespec span(long us) { return {us / 1'000'000, (us % 1'000'000) * 1000}; }

// N waits ended by their own timeout (the descriptor watched never becomes ready).
Result timer_waits(long n, long gap_us) {
  int fds[2];
  if (pipe(fds) != 0) die("pipe");
  const int ep = watch_input(fds[0]);
  const timespec ts = span(gap_us);
  epoll_event out[4];
  const txn::Usage u0 = txn::own_usage(RUSAGE_THREAD);
  for (long i = 0; i < n; ++i)
    if (epoll_pwait2(ep, out, 4, &ts, nullptr) < 0 && errno != EINTR) die("epoll_pwait2");
  const Result r = since(u0, n);
  close(ep);
  close(fds[0]);
  close(fds[1]);
  return r;
}

// Waits ended by a byte from another process, one every gap: each finds the reader asleep again (a wake-up and a
// read take a small part of the gap); a byte that did not is read with the one before it, in one wake-up.
Result frame_waits(long n, long gap_us) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(sv[0]);
    const timespec ts = span(gap_us);
    char b = 'x';
    for (long i = 0; i < n; ++i) {
      nanosleep(&ts, nullptr);
      if (write(sv[1], &b, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  close(sv[1]);
  const int ep = watch_input(sv[0]);
  epoll_event out[4];
  const txn::Usage u0 = txn::own_usage(RUSAGE_THREAD);
  long got = 0, waits = 0;
  char buf[64];
  while (got < n) {
    const int k = epoll_pwait2(ep, out, 4, nullptr, nullptr);
    if (k < 0 && errno != EINTR) die("epoll_pwait2");
    if (k <= 0) continue;
    ++waits;
    const ssize_t m = read(sv[0], buf, sizeof buf);
    if (m == 0) errno = EPIPE;   // the writing process ended early
    if (m <= 0) die("read");
    got += m;
  }
  const Result r = since(u0, waits);
  int status = 0;
  waitpid(child, &status, 0);
  close(ep);
  close(sv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "txn-wakecost: the writing process failed\n");
    std::exit(1);
  }
  return r;
}

long parse_count(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "txn-wakecost: %s %s: expected a whole number in %ld-%ld\n", flag, v, lo, hi);
    std::exit(2);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 2000, gap_us = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--waits" || a == "--gap-us") && i + 1 < argc) {
      if (a == "--waits") n = parse_count("--waits", argv[++i], 1, 1'000'000);
      else gap_us = parse_count("--gap-us", argv[++i], 1, 1'000'000);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: txn-wakecost [--waits N (2000)] [--gap-us US (1000)]: the CPU a wake-up costs here\n");
      return 0;
    } else {
      std::fprintf(stderr, "txn-wakecost: %s: unknown or missing a value (--waits N, --gap-us US)\n", a.c_str());
      return 2;
    }
  }
  const Result t = timer_waits(n, gap_us);
  const Result f = frame_waits(n, gap_us);
  std::printf("{\"timer_wake_us\": %.2f, \"frame_wake_us\": %.2f, \"timer_wakes\": %ld, \"frame_wakes\": %ld, "
              "\"waits\": %ld, \"gap_us\": %ld}\n",
              t.us_per_wake, f.us_per_wake, t.wakes, f.wakes, n, gap_us);
  return 0;
}
