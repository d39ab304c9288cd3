#include "runtime/process.h"

#include <getopt.h>
#include <pthread.h>
#include "core/usage.h"
#include <unistd.h>
#include <absl/synchronization/mutex.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "client/client_node.h"
#include "client/probe_node.h"
#include "core/json.h"
#include "core/txn_log.h"
#include "core/protocol.h"
#include "core/recovery.h"
#include "runtime/clock.h"
#include "runtime/event_loop.h"
#include "runtime/tcp_transport.h"
#include "runtime/transport.h"

namespace txn::runtime {
namespace {

// Set on the event loop's thread (EventLoop::wake_on_signals), read in its should_stop.
int g_signal = 0;   // SIGTERM or SIGINT: stop (a server drains first)
bool g_go = false;  // SIGUSR1: the clients of a server's process may start

// Exits without running destructors: transport threads and open streams make an
// orderly teardown slow and fragile, and all outputs are already written.
[[noreturn]] void quit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

struct Fatal {
  int code;
  std::string msg;
};

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

// CLOCK_REALTIME in microseconds.
int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// Every node on a loopback address: the deployment's processes all run on this host (one kernel, one clock).
bool on_loopback(const Deployment& d) {
  return std::all_of(d.nodes.begin(), d.nodes.end(), [](const NodeInfo& n) {
    return n.host.rfind("127.", 0) == 0 || n.host == "localhost" || n.host == "::1";
  });
}

// Adds `fields` (already "k": v, ...) in front of the keys of a JSON object.
std::string prepend_fields(const std::string& obj, const std::string& fields) {
  size_t b = obj.find('{');
  if (b == std::string::npos) return "{" + fields + "}";
  size_t rest = obj.find_first_not_of(" \t\r\n", b + 1);
  bool empty = rest != std::string::npos && obj[rest] == '}';
  return "{" + fields + (empty ? "" : ", ") + obj.substr(b + 1);
}

// What the checker must know about the process itself (docs/checker.md): lost
// messages and an unfinished drain fail the run.
std::string process_facts(const Transport& t, uint64_t rejected, bool drain_timed_out) {
  const Transport::Drops d = t.drops();
  std::string to = "{", given_up = "[";
  for (const auto& [proc, n] : d.to_process) to += (to.size() > 1 ? ", " : "") + json_string(proc) + ": " + std::to_string(n);
  for (const auto& proc : d.given_up) given_up += (given_up.size() > 1 ? ", " : "") + json_string(proc);
  return "{\"dropped_messages\": " + std::to_string(d.to_servers) + ", \"dropped_to\": " + to + "}" +
         ", \"unreachable_peers\": " + given_up + "]" +
         ", \"junk_connections\": " + std::to_string(t.junk_connections()) +
         ", \"queued_peak_bytes\": " + std::to_string(t.queued_peak_bytes()) +
         (t.junk_connections() ? ", \"junk_from\": \"" + t.junk_from() + "\"" : std::string()) +
         ", \"dropped_to_clients\": " + std::to_string(d.to_clients) +
         ", \"malformed_messages\": " + std::to_string(d.malformed) +
         ", \"rejected_messages\": " + std::to_string(rejected) +
         ", \"drain_timed_out\": " + (drain_timed_out ? "true" : "false") + "}";
}

// The process's own CPU seconds (user + system, all its threads) and the times it gave up the CPU to wait (its
// voluntary context switches: its wake-ups), so far: what a backend that cannot read its children's rusage (swarm)
// sums into the run's cpu_seconds and engine_wakeups (testbed/runs/lifecycle.py); and its memory at the end: resident,
// what the program holds (allocated), and what the allocator holds free without having handed it back (-1 where
// the allocator does not say): of a resident size that grew, how much is state and how much the allocator's.
std::string own_usage_fields() {
  const Usage u = own_usage();
  const Memory m = own_memory();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ", \"cpu_s\": %.6f, \"voluntary_switches\": %ld, \"rss_bytes\": %lld, \"heap_allocated_bytes\": %lld"
                ", \"heap_held_free_bytes\": %lld",
                u.cpu_s, u.voluntary_switches, static_cast<long long>(m.rss), static_cast<long long>(m.allocated),
                static_cast<long long>(m.held_free));
  return buf;
}

std::string counters_json(const std::map<std::string, int64_t>& c) {
  std::string o = "{";
  for (const auto& [k, v] : c) o += (o.size() > 1 ? ", " : "") + json_string(k) + ": " + std::to_string(v);
  return o + "}";
}

// Load start (docs/nemesis.md): the runner writes it, in microseconds since the epoch, to `load_start` beside the
// deployment file before it says go; a process with engine-side faults reads it at the go (servers) or at its
// start (client processes, started after the go). Without the file, t = 0 is this process's go, and it says so.
void anchor_faults(EventLoop& loop, const Deployment& d, const std::string& config, const std::string& pname) {
  if (!d.faults.engine_side() || loop.load_start_wall().known()) return;
  const size_t slash = config.find_last_of('/');
  const std::string path = (slash == std::string::npos ? std::string(".") : config.substr(0, slash)) + "/load_start";
  const TimeUs now = wall_us();
  TimeUs zero = kNoTime;
  std::ifstream f(path);
  long long v = 0;
  if (f >> v && v > 0) zero = v;
  std::printf("FAULTS %s load_start_us=%lld read_at_us=%lld source=%s\n", pname.c_str(),
              static_cast<long long>(zero == kNoTime ? now : zero), static_cast<long long>(now),
              zero == kNoTime ? "own-go (no load_start file)" : path.c_str());
  std::fflush(stdout);
  loop.set_load_start(zero == kNoTime ? now : zero);
}

// A client in a server's process (docs/efficiency.md): it starts when the runner says go (SIGUSR1), once every
// server of the run is READY, as a client process would be started then.
class Gated final : public Node {
 public:
  explicit Gated(std::unique_ptr<Node> n) : n_(std::move(n)) {}
  void start(Env&) override {}
  void open(Env& env) { n_->start(env); }
  void on_message(Env& env, Envelope& m) override { n_->on_message(env, m); }
  void on_timer(Env& env, uint64_t id) override { n_->on_timer(env, id); }
  bool idle() const override { return n_->idle(); }

 private:
  std::unique_ptr<Node> n_;
};

// One node of the process: what it is, and for clients their transaction file.
struct Hosted {
  const NodeInfo* info = nullptr;
  std::unique_ptr<Node> node;
  ClientNode* client = nullptr;
  ProbeNode* prober = nullptr;
  ReplicaNode* replica = nullptr;
  Gated* gated = nullptr;   // a client in a server's process
  std::unique_ptr<TxnLogWriter> txns;
};

int run(Role role, const char* prog, int argc, char** argv) {
  std::string usage = std::string("usage: ") + prog + " --config FILE (--name NODE | --process NAME) " +
                      (role == Role::Client ? "--out DIR [--probe N]" : "[--out DIR] [--client-out DIR] [--recover]") +
                      " | --config FILE --check | --list-modes [--json]";
  std::string config, name, process, out = ".", client_out;
  int probe = 0;  // txn-client --probe N: RTT self-test instead of the workload
  bool list_modes = false, json = false, check = false, recover = false;
  static const option opts[] = {{"config", required_argument, nullptr, 'c'},
                                {"name", required_argument, nullptr, 'n'},
                                {"process", required_argument, nullptr, 'P'},
                                {"out", required_argument, nullptr, 'o'},
                                {"client-out", required_argument, nullptr, 'C'},
                                {"help", no_argument, nullptr, 'h'},
                                {"list-modes", no_argument, nullptr, 'l'},
                                {"json", no_argument, nullptr, 'j'},
                                {"probe", required_argument, nullptr, 'p'},
                                {"check", no_argument, nullptr, 'k'},
                                {"recover", no_argument, nullptr, 'R'},
                                {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'c') config = optarg;
    else if (c == 'n') name = optarg;
    else if (c == 'P') process = optarg;
    else if (c == 'o') out = optarg;
    else if (c == 'C' && role == Role::Server) client_out = optarg;
    else if (c == 'h') { std::cout << usage << "\n"; return 0; }
    else if (c == 'p' && role == Role::Client) {
      char* end = nullptr;
      long v = std::strtol(optarg, &end, 10);
      if (!end || *end || v < 1 || v > 100000) throw Fatal{2, "--probe " + std::string(optarg) + ": must be an integer in [1, 100000]"};
      probe = static_cast<int>(v);
    } else if (c == 'l') list_modes = true;
    else if (c == 'j') json = true;
    else if (c == 'k') check = true;
    else if (c == 'R' && role == Role::Server) recover = true;
    else throw Fatal{2, "bad argument " + std::string(argv[optind - 1]) + "\n" + usage};
  }
  if (optind < argc) throw Fatal{2, "unexpected argument " + std::string(argv[optind]) + "\n" + usage};
  if (json && !list_modes) throw Fatal{2, "--json goes with --list-modes\n" + usage};
  if (list_modes) {
    // The protocol registry: names one per line, or all of it (docs/protocol-registry.md).
    if (json) std::cout << registry_json();
    else for (const auto& m : protocol_names()) std::cout << m << "\n";
    return 0;
  }
  if (check && (config.empty() || !name.empty() || !process.empty()))
    throw Fatal{2, "--check goes with --config alone\n" + usage};
  if (check) {  // validate the deployment file as a run would, start nothing
    try {
      const Deployment d = load_deployment(config);
      make_workload(d);
      std::cout << "ok: " << config << ": " << d.nodes.size() << " nodes, mode " << d.mode << "\n";
      return 0;
    } catch (const ConfigError& e) {
      throw Fatal{2, e.what()};
    }
  }
  if (config.empty() || name.empty() == process.empty())
    throw Fatal{2, "--config and one of --name, --process are required\n" + usage};
  if (probe > 0 && name.empty()) throw Fatal{2, "--probe goes with --name\n" + usage};
  if (recover && name.empty()) throw Fatal{2, "--recover goes with --name (the restarted replica)\n" + usage};

  Deployment d;
  TransportOptions topt;
  topt.prog = prog;
  std::unique_ptr<Workload> w;
  try {
    d = load_deployment(config);
    topt.connect_timeout_s = d.runtime.connect_timeout_s;
    topt.token = deployment_token(d);   // a connection that does not open with it is refused (junk)
    // Every node on this machine's loopback (a local run): listen there only, not on every interface.
    if (std::all_of(d.nodes.begin(), d.nodes.end(), [](const NodeInfo& n) { return loopback_host(n.host); }))
      topt.bind_host = "127.0.0.1";
    w = make_workload(d);   // the file's errors before the arguments'
  } catch (const ConfigError& e) {
    throw Fatal{2, e.what()};
  }
  // The nodes this process runs: one (--name), or every node of a process of the deployment (--process).
  std::vector<NodeId> ids;
  if (!name.empty()) {
    const NodeInfo* me = d.find(name);
    if (!me) throw Fatal{2, "node '" + name + "' not in " + config};
    const auto group = d.process_nodes(d.process_of(me->id));
    if (group.size() > 1 && probe == 0)
      throw Fatal{2, "node '" + name + "' runs in process '" + d.process_of(me->id) + "' with " +
                         std::to_string(group.size() - 1) + " other node(s); run it with --process " +
                         d.process_of(me->id)};
    if (d.endpoint(me->id) != me->id)
      throw Fatal{2, "node '" + name + "' is not the first node of process '" + d.process_of(me->id) +
                         "': its messages go to that process's port"};
    ids.push_back(me->id);
    // A replica started again in a running deployment (docs/nemesis.md, crash:NODE@S+T, or by hand): it asks the
    // live replicas of its shard for their state (src/core/recovery.h). Nothing else tells it or its peers.
    if (recover && me->kind != NodeKind::Replica)
      throw Fatal{2, "--recover: '" + name + "' is not a replica (only a replica is started again to catch up)"};
  } else {
    ids = d.process_nodes(process);
    if (ids.empty()) throw Fatal{2, "process '" + process + "' not in " + config};
  }
  const std::string pname = name.empty() ? process : d.process_of(ids.front());
  // txn-client runs clients only; txn-server runs servers, and the clients of a process that has servers.
  bool any_server = false;
  for (NodeId id : ids) any_server |= d.node(id).kind != NodeKind::Client;
  for (NodeId id : ids) {
    const NodeInfo& n = d.node(id);
    const bool is_client = n.kind == NodeKind::Client;
    if (is_client ? role == Role::Server && !any_server : role == Role::Client)
      throw Fatal{2, "node '" + n.name + "' is a " + (is_client ? "client" : "server") + "; run it with " +
                         (is_client ? "txn-client" : "txn-server")};
  }
  const bool client_process = role == Role::Client;
  // Where client nodes write: a client process's --out, a server process's --client-out (default: --out).
  const std::string& cout_dir = client_process || client_out.empty() ? out : client_out;

  std::vector<Hosted> hosted(ids.size());
  try {
    const ProtocolSpec& spec = find_protocol(d.mode);
    for (size_t i = 0; i < ids.size(); ++i) {
      Hosted& h = hosted[i];
      h.info = &d.node(ids[i]);
      if (h.info->kind == NodeKind::Replica && recover) {   // restarted empty: catches up, then follows
        auto l = std::make_unique<Learner>(d, h.info->id, *w,
                                           spec.make_voter ? spec.make_voter(d, h.info->id, *w) : nullptr);
        l->on_voting([node = h.info->name](Env&, uint64_t epoch, TimeUs after_us) {
          std::printf("VOTING %s epoch=%llu after_us=%lld wall_us=%lld\n", node.c_str(),
                      static_cast<unsigned long long>(epoch), static_cast<long long>(after_us),
                      static_cast<long long>(wall_us()));
          std::fflush(stdout);
        });
        l->on_caught_up([&d, node = h.info->name](Env&, uint64_t events, TimeUs after_us, NodeId source) {
          std::printf("CAUGHT_UP %s events=%llu after_us=%lld wall_us=%lld source=%s\n", node.c_str(),
                      static_cast<unsigned long long>(events), static_cast<long long>(after_us),
                      static_cast<long long>(wall_us()), d.node(source).name.c_str());
          std::fflush(stdout);
        });
        auto r = serve_catch_up(d, h.info->id, std::move(l));   // and serves a later restarted peer in turn
        h.replica = r.get();
        h.node = std::move(r);
      } else if (h.info->kind == NodeKind::Replica) {
        auto r = serve_catch_up(d, h.info->id, spec.make_replica(d, h.info->id, *w));
        h.replica = r.get();
        h.node = std::move(r);
      } else if (h.info->kind == NodeKind::Role) {
        h.node = spec.role(h.info->role)->make(d, h.info->id);  // validated: d.mode has this role
      } else if (probe > 0) {
        auto p = std::make_unique<ProbeNode>(d, h.info->id, probe);
        h.prober = p.get();
        h.node = std::move(p);
      } else {
        auto c = std::make_unique<ClientNode>(d, h.info->id, *w, spec.make_client_driver(d, h.info->id));
        h.client = c.get();
        if (client_process) {
          h.node = std::move(c);
        } else {
          auto g = std::make_unique<Gated>(std::move(c));
          h.gated = g.get();
          h.node = std::move(g);
        }
      }
    }
  } catch (const ConfigError& e) {
    throw Fatal{2, e.what()};
  }
  // A replica's history goes to its file as it grows (its memory stays flat); TXN_HISTORY_KEEP: the events kept in
  // memory (ShardExecutor::kKeepEvents; the tests make it small, so that a short run writes most of it early).
  size_t keep = ShardExecutor::kKeepEvents;
  if (const char* k = std::getenv("TXN_HISTORY_KEEP"); k && *k) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(k, &end, 10);
    if (*end || v == 0 || v > (1ull << 30)) throw Fatal{2, std::string("TXN_HISTORY_KEEP=") + k + ": not a count in [1, 2^30]"};
    keep = static_cast<size_t>(v);
  }
  for (Hosted& h : hosted) {
    if (!h.replica) continue;
    auto f = std::make_shared<HistoryFile>(out + "/" + h.info->name + ".history.txt", h.info->name);
    if (!const_cast<ShardExecutor&>(h.replica->executor()).stream_to(f, keep))
      throw Fatal{1, "cannot write " + f->path + ".part"};
  }
  for (Hosted& h : hosted) {
    if (!h.client) continue;
    h.txns = std::make_unique<TxnLogWriter>(cout_dir + "/" + h.info->name + ".txns.pb.gz");
    if (!h.txns->ok()) throw Fatal{1, "cannot write " + h.txns->path()};
    TxnLogWriter* f = h.txns.get();
    h.client->set_txn_sink([f](const TxnLogEntry& e) { f->write(e); });
  }
  const bool gated_clients = std::any_of(hosted.begin(), hosted.end(), [](const Hosted& h) { return h.gated; });

  EventLoop loop(d, ids);
  // The tcp transport runs on the loop's thread (its reactor); the grpc one polls a thread of its own.
  auto transport_ptr = make_transport(
      d, ids, topt, [&loop](Envelope&& m, TimeUs due) { loop.post(std::move(m), due); },
      [&loop](const std::string& l) { loop.env().log(l); }, &loop.reactor());
  Transport& transport = *transport_ptr;
  transport.use_faults(&loop.load_start_mono());
  loop.set_sender([&transport](Envelope&& m) { transport.enqueue(std::move(m)); }, [&transport] { transport.flush(); });
  std::string err;
  if (!transport.listen(&err)) throw Fatal{1, err};
  // The stop signals are blocked in every thread (see run_process) and reach the loop's thread while it runs.
  loop.wake_on_signals({SIGTERM, SIGINT, SIGUSR1}, [](int sig) {
    if (sig == SIGUSR1) g_go = true;
    else g_signal = sig;
  });
  if (d.link.mechanism != "none") loop.set_delivery_grid_us(d.runtime.delivery_grid_us);
  // Quiet waits: on loopback every process runs on this kernel and stamps its frames with its steady clock, so a
  // process may leave its sockets unread while nothing they bring can be due (docs/efficiency.md).
  if (auto* tcp = dynamic_cast<TcpTransport*>(&transport); tcp != nullptr && on_loopback(d)) {
    if (const TimeUs least = loop.min_incoming_delay_us(); least > 0) {
      loop.set_quiet_horizon_us(least + loop.delivery_grid_us() / 2);
      tcp->on_foreign_clock([&loop] {
        loop.set_quiet_horizon_us(0);
        loop.env().log("a frame not stamped with this host's clock: sockets are read at once from now on");
      });
    }
  }
  loop.set_max_sleep_us(1'000'000);   // nothing to poll for: the stop comes as a signal, the end as a timer
  const NodeInfo& ep = d.node(transport.self());
  for (const Hosted& h : hosted) std::printf("READY %s %s:%u\n", h.info->name.c_str(), ep.host.c_str(), ep.port);
  if (ids.size() > 1 || pname != d.node(ids.front()).name)  // the process as a whole, for the runner
    std::printf("READY %s %s:%u\n", pname.c_str(), ep.host.c_str(), ep.port);
  std::fflush(stdout);

  std::vector<Node*> nodes;
  for (Hosted& h : hosted) nodes.push_back(h.node.get());
  using Clock = std::chrono::steady_clock;
  bool draining = false, interrupted = false, drain_timed_out = false, clients_written = false, opened = false;
  // What the process says about itself goes into each of its nodes' outputs, named, so the checker counts it
  // once; rejected messages are each node's own.
  auto facts = [&](size_t i, bool timed_out) {
    std::string f = process_facts(transport, loop.rejected(i), timed_out);
    return prepend_fields(f, "\"name\": " + json_string(pname) + ", \"nodes\": " + std::to_string(ids.size()) +
                                 ", \"local_messages\": " + std::to_string(loop.local_messages()) +
                                 ", \"remote_messages\": " + std::to_string(loop.remote_messages()) +
                                 ", \"rounds\": " + std::to_string(loop.rounds()) +
                                 ", \"empty_rounds\": " + std::to_string(loop.empty_rounds()) +
                                 ", \"timer_rounds\": " + std::to_string(loop.timer_rounds()) +
                                 ", \"quiet_waits\": " + std::to_string(loop.quiet_waits()) +
                                 ", \"writes\": " + std::to_string(transport.writes()) +
                                 ", \"written_messages\": " + std::to_string(transport.written()) +
                                 own_usage_fields());
  };
  // A client's outputs, when its process's clients are done (or it is stopped): records, summary, transactions.
  auto write_client_outputs = [&] {
    clients_written = true;
    // CLOCK_REALTIME - CLOCK_MONOTONIC now: a client's start on the wall clock, which hosts share (to NTP's error)
    const int64_t mono_to_wall = wall_us() - runtime::steady_us();
    std::vector<std::string> names;
    for (uint32_t t = 0; t < w->n_types(); ++t) names.push_back(w->type_name(t));
    for (size_t i = 0; i < hosted.size(); ++i) {
      Hosted& h = hosted[i];
      if (!h.client) continue;
      const auto& recs = h.client->records();
      Summary s = summarize(recs, d.client.duration_s, d.client.warmup_s, d.client.cooldown_s);
      if (!h.txns->close()) throw Fatal{1, "cannot write " + h.txns->path()};
      // run_start_mono_us + a record's start_us (or sent_us) is its start (send) on CLOCK_MONOTONIC, which every
      // process under one kernel (boot_id) shares: the checker's real-time order (docs/checker.md).
      std::string js = prepend_fields(summary_json(s), "\"node\": " + json_string(h.info->name) +
                                                           ", \"run_start_mono_us\": " +
                                                           std::to_string(h.client->run_start_us()) +
                                                           ", \"boot_id\": " + json_string(boot_id()) +
                                                           ", \"run_start_wall_us\": " +
                                                           std::to_string(h.client->run_start_us() + mono_to_wall) +
                                                           ", \"n_records\": " + std::to_string(recs.size()) +
                                                           ", \"n_txns\": " + std::to_string(h.txns->entries()) +
                                                           ", \"interrupted\": " + (interrupted ? "true" : "false") +
                                                           (h.client->open_loop()
                                                                ? ", \"open_loop\": " + h.client->open_loop_json()
                                                                : std::string()) +
                                                           ", \"process\": " + facts(i, false));
      if (!write_file(cout_dir + "/" + h.info->name + ".records.csv", records_csv(recs, names)) ||
          !write_file(cout_dir + "/" + h.info->name + ".summary.json", js + "\n"))
        throw Fatal{1, "cannot write results to " + cout_dir};
    }
  };
  Clock::time_point drain_start, idle_since;
  bool idle_seen = false;
  // A client process starts after the go; so does a restarted replica: each learns load start as it starts.
  if ((client_process && probe == 0) || recover) anchor_faults(loop, d, config, pname);
  loop.run(nodes, [&] {
    if (g_go) anchor_faults(loop, d, config, pname);
    if (gated_clients && g_go && !opened) {   // the runner's go: every server is READY
      opened = true;
      for (size_t i = 0; i < hosted.size(); ++i)
        if (hosted[i].gated) hosted[i].gated->open(loop.env(i));
      std::printf("GO %s\n", pname.c_str());   // in its log: when its clients started
      std::fflush(stdout);
    }
    if (gated_clients && opened && !clients_written &&
        std::all_of(hosted.begin(), hosted.end(), [](const Hosted& h) { return !h.client || h.client->finished(); })) {
      write_client_outputs();
      std::printf("DONE %s\n", pname.c_str());   // the runner waits for this line as for a client's exit
      std::fflush(stdout);
    }
    if (client_process) {
      if (g_signal) interrupted = true;
      if (interrupted) return true;
      for (const Hosted& h : hosted)
        if (!(h.client ? h.client->finished() : h.prober->finished())) return false;
      return true;
    }
    if (!g_signal) return false;
    auto now = Clock::now();
    if (!draining) {
      draining = true;
      drain_start = now;
      transport.set_draining(true);
      loop.set_max_sleep_us(20'000);   // idleness is polled
    }
    if (now - drain_start >= std::chrono::seconds(10)) {
      loop.env().log("drain: still busy after 10 s, stopping anyway");
      drain_timed_out = true;
      return true;
    }
    for (const Hosted& h : hosted)
      if (!h.node->idle()) {
        idle_seen = false;
        return false;
      }
    if (!idle_seen) {
      idle_seen = true;
      idle_since = now;
    }
    return now - idle_since >= std::chrono::milliseconds(200);
  });

  if (probe > 0) {
    const Hosted& h = hosted.front();
    const std::string path = out + "/" + h.info->name + ".probe.json";
    if (!write_file(path, h.prober->result_json() + "\n")) throw Fatal{1, "cannot write " + path};
    return interrupted ? 130 : 0;
  }
  if (client_process) {
    write_client_outputs();
    return interrupted ? 130 : 0;
  }
  if (gated_clients && !clients_written) {   // stopped before its clients were done
    interrupted = true;
    write_client_outputs();
  }
  // Every server writes a dump: a replica its store, history and counters, a
  // role node only the process facts (docs/checker.md).
  for (size_t i = 0; i < hosted.size(); ++i) {
    const Hosted& h = hosted[i];
    const NodeInfo& me = *h.info;
    std::string dump = "{}", fields;
    size_t history_lines = 0;
    const std::string hist = me.name + ".history.txt";
    if (h.replica) {
      // The history first: a dump that exists names a complete history (streamed to its file during the run).
      auto& ex = const_cast<ShardExecutor&>(h.replica->executor());
      std::string err;
      if (!ex.finish_history(&err)) throw Fatal{1, err};
      history_lines = ex.history_file()->lines;
      dump = h.replica->store().dump_json();
    }
    auto add = [&](const std::string& k, const std::string& v) {
      if (dump.find("\"" + k + "\"") != std::string::npos) return;  // the store carries it already
      fields += (fields.empty() ? "" : ", ") + json_string(k) + ": " + v;
    };
    add("node", json_string(me.name));
    add("kind", json_string(h.replica ? "replica" : "manager"));
    add("region", std::to_string(me.region));
    if (h.replica) {
      add("shard", std::to_string(me.shard));
      add("replica", std::to_string(me.replica));
      add("workload", json_string(w->name()));
      add("execution_history", "{\"file\": " + json_string(hist) + ", \"events\": " +
                                   std::to_string(h.replica->executor().events()) +
                                   ", \"lines\": " + std::to_string(history_lines) + "}");
      add("counters", counters_json(h.replica->counters()));
    }
    add("process", facts(i, drain_timed_out));

    std::string js = prepend_fields(dump, fields);
    if (!write_file(out + "/" + me.name + ".state.json", js + "\n"))
      throw Fatal{1, "cannot write " + out + "/" + me.name + ".state.json"};
  }
  return 0;
}

}  // namespace

int run_process(Role role, int argc, char** argv) {
  const char* prog = role == Role::Server ? "txn-server" : "txn-client";
  // Debian's abseil checks every mutex acquisition for lock-order cycles, a
  // debugging aid that costs CPU inside gRPC on every message.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // SIGTERM, SIGINT and SIGUSR1 (go) are blocked before any thread starts (a transport's, gRPC's), so they stay
  // blocked there; the event loop's thread unblocks them while it runs and takes them through its io_context, so
  // it needs no polling to notice them (EventLoop::wake_on_signals).
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  int code;
  try {
    code = run(role, prog, argc, argv);
  } catch (const Fatal& f) {
    std::fprintf(stderr, "%s: error: %s\n", prog, f.msg.c_str());
    code = f.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", prog, e.what());
    code = 1;
  }
  quit(code);
}

}  // namespace txn::runtime
