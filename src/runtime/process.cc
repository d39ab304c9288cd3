#include "runtime/process.h"

#include <getopt.h>
#include <unistd.h>
#include <absl/synchronization/mutex.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

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
#include "core/protocol.h"
#include "runtime/event_loop.h"
#include "runtime/transport.h"

namespace txn::runtime {
namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// Exits without running destructors: gRPC threads and open streams make an
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
std::string process_facts(const Transport& t, const EventLoop& loop, bool drain_timed_out) {
  const Transport::Drops d = t.drops();
  return "{\"dropped_messages\": " + std::to_string(d.to_servers) +
         ", \"dropped_to_clients\": " + std::to_string(d.to_clients) +
         ", \"malformed_messages\": " + std::to_string(d.malformed) +
         ", \"rejected_messages\": " + std::to_string(loop.rejected()) +
         ", \"drain_timed_out\": " + (drain_timed_out ? "true" : "false") + "}";
}

std::string counters_json(const std::map<std::string, int64_t>& c) {
  std::string o = "{";
  for (const auto& [k, v] : c) o += (o.size() > 1 ? ", " : "") + json_string(k) + ": " + std::to_string(v);
  return o + "}";
}

// clients/<name>.txns.jsonl.gz: one protobuf-JSON TxnLogEntry per finished
// transaction, gzip-compressed at the fastest level (about 7x: the requests
// repeat their keys).
class TxnFile {
 public:
  explicit TxnFile(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "wb1")) {
    opt_.preserve_proto_field_names = true;
  }
  ~TxnFile() {
    if (f_) gzclose(f_);
  }
  bool ok() const { return f_ != nullptr; }
  void write(const TxnLogEntry& e) {
    line_.clear();
    if (!f_ || !google::protobuf::util::MessageToJsonString(e, &line_, opt_).ok()) {
      failed_ = true;
      return;
    }
    line_ += '\n';
    if (gzwrite(f_, line_.data(), static_cast<unsigned>(line_.size())) != static_cast<int>(line_.size()))
      failed_ = true;
    ++n_;
  }
  bool close() {
    const bool closed = f_ && gzclose(f_) == Z_OK;
    f_ = nullptr;
    return closed && !failed_;
  }
  uint64_t lines() const { return n_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile f_;
  google::protobuf::util::JsonPrintOptions opt_;
  std::string line_;
  uint64_t n_ = 0;
  bool failed_ = false;
};

int run(Role role, const char* prog, int argc, char** argv) {
  std::string usage = std::string("usage: ") + prog + " --config FILE --name NAME " +
                      (role == Role::Client ? "--out DIR [--probe N]" : "[--out DIR]") + " | --list-modes [--json]";
  std::string config, name, out = ".";
  int probe = 0;  // txn-client --probe N: RTT self-test instead of the workload
  bool list_modes = false, json = false;
  static const option opts[] = {{"config", required_argument, nullptr, 'c'},
                                {"name", required_argument, nullptr, 'n'},
                                {"out", required_argument, nullptr, 'o'},
                                {"help", no_argument, nullptr, 'h'},
                                {"list-modes", no_argument, nullptr, 'l'},
                                {"json", no_argument, nullptr, 'j'},
                                {"probe", required_argument, nullptr, 'p'},
                                {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'c') config = optarg;
    else if (c == 'n') name = optarg;
    else if (c == 'o') out = optarg;
    else if (c == 'h') { std::cout << usage << "\n"; return 0; }
    else if (c == 'p' && role == Role::Client) {
      char* end = nullptr;
      long v = std::strtol(optarg, &end, 10);
      if (!end || *end || v < 1 || v > 100000) throw Fatal{2, "--probe " + std::string(optarg) + ": must be an integer in [1, 100000]"};
      probe = static_cast<int>(v);
    } else if (c == 'l') list_modes = true;
    else if (c == 'j') json = true;
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
  if (config.empty() || name.empty()) throw Fatal{2, "--config and --name are required\n" + usage};

  Deployment d;
  TransportOptions topt;
  topt.prog = prog;
  try {
    d = load_deployment(config);
    topt.connect_timeout_s = d.runtime.connect_timeout_s;
  } catch (const ConfigError& e) {
    throw Fatal{2, e.what()};
  }
  const NodeInfo* me = d.find(name);
  if (!me) throw Fatal{2, "node '" + name + "' not in " + config};
  bool is_client = me->kind == NodeKind::Client;
  if (is_client != (role == Role::Client))
    throw Fatal{2, "node '" + name + "' is a " + (is_client ? "client" : "server") +
                       "; run it with " + (is_client ? "txn-client" : "txn-server")};

  std::unique_ptr<Workload> w;
  std::unique_ptr<Node> node;
  ClientNode* client = nullptr;
  ProbeNode* prober = nullptr;
  ReplicaNode* replica = nullptr;
  try {
    w = make_workload(d);
    const ProtocolSpec& spec = find_protocol(d.mode);
    if (me->kind == NodeKind::Replica) {
      auto r = spec.make_replica(d, me->id, *w);
      replica = r.get();
      node = std::move(r);
    } else if (me->kind == NodeKind::Role) {
      node = spec.role(me->role)->make(d, me->id);  // validated: d.mode has this role
    } else if (probe > 0) {
      auto p = std::make_unique<ProbeNode>(d, me->id, probe);
      prober = p.get();
      node = std::move(p);
    } else {
      auto c = std::make_unique<ClientNode>(d, me->id, *w, spec.make_client_driver(d, me->id));
      client = c.get();
      node = std::move(c);
    }
  } catch (const ConfigError& e) {
    throw Fatal{2, e.what()};
  }
  std::unique_ptr<TxnFile> txns;
  if (client) {
    txns = std::make_unique<TxnFile>(out + "/" + name + ".txns.jsonl.gz");
    if (!txns->ok()) throw Fatal{1, "cannot write " + txns->path()};
    client->set_txn_sink([&txns](const TxnLogEntry& e) { txns->write(e); });
  }

  EventLoop loop(d, me->id);
  Transport transport(d, me->id, topt, [&loop](Envelope&& m, TimeUs due) { loop.post(std::move(m), due); },
                      [&loop](const std::string& l) { loop.env().log(l); });
  loop.set_sender([&transport](Envelope&& m) { transport.send(std::move(m)); });
  std::string err;
  if (!transport.listen(&err)) throw Fatal{1, err};
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::printf("READY %s %s:%u\n", name.c_str(), me->host.c_str(), me->port);
  std::fflush(stdout);

  using Clock = std::chrono::steady_clock;
  bool draining = false, interrupted = false, drain_timed_out = false;
  Clock::time_point drain_start, idle_since;
  bool idle_seen = false;
  loop.run(*node, [&] {
    if (client || prober) {
      if (g_signal) interrupted = true;
      return interrupted || (client ? client->finished() : prober->finished());
    }
    if (!g_signal) return false;
    auto now = Clock::now();
    if (!draining) {
      draining = true;
      drain_start = now;
      transport.set_draining(true);
    }
    if (now - drain_start >= std::chrono::seconds(10)) {
      loop.env().log("drain: still busy after 10 s, stopping anyway");
      drain_timed_out = true;
      return true;
    }
    if (!node->idle()) {
      idle_seen = false;
      return false;
    }
    if (!idle_seen) {
      idle_seen = true;
      idle_since = now;
    }
    return now - idle_since >= std::chrono::milliseconds(200);
  });

  if (prober) {
    if (!write_file(out + "/" + name + ".probe.json", prober->result_json() + "\n"))
      throw Fatal{1, "cannot write " + out + "/" + name + ".probe.json"};
    return interrupted ? 130 : 0;
  }
  if (client) {
    const auto& recs = client->records();
    std::vector<std::string> names;
    for (uint32_t t = 0; t < w->n_types(); ++t) names.push_back(w->type_name(t));
    Summary s = summarize(recs, d.client.duration_s, d.client.warmup_s, d.client.cooldown_s);
    if (!txns->close()) throw Fatal{1, "cannot write " + txns->path()};
    std::string js = prepend_fields(summary_json(s), "\"node\": " + json_string(name) +
                                                         ", \"n_records\": " + std::to_string(recs.size()) +
                                                         ", \"n_txns\": " + std::to_string(txns->lines()) +
                                                         ", \"interrupted\": " + (interrupted ? "true" : "false") +
                                                         ", \"process\": " + process_facts(transport, loop, false));
    if (!write_file(out + "/" + name + ".records.csv", records_csv(recs, names)) ||
        !write_file(out + "/" + name + ".summary.json", js + "\n"))
      throw Fatal{1, "cannot write results to " + out};
    return interrupted ? 130 : 0;
  }
  // Every server writes a dump: a replica its store, history and counters, a
  // manager only the process facts (docs/checker.md).
  std::string dump = "{}", fields;
  size_t history_lines = 0;
  const std::string hist = name + ".history.txt";
  if (replica) {
    // The history first: a dump that exists names a complete history.
    std::ostringstream h;
    history_lines = replica->executor().write_history(h, name);
    if (!write_file(out + "/" + hist, h.str())) throw Fatal{1, "cannot write " + out + "/" + hist};
    dump = replica->store().dump_json();
  }
  auto add = [&](const std::string& k, const std::string& v) {
    if (dump.find("\"" + k + "\"") != std::string::npos) return;  // the store carries it already
    fields += (fields.empty() ? "" : ", ") + json_string(k) + ": " + v;
  };
  add("node", json_string(name));
  add("kind", json_string(replica ? "replica" : "manager"));
  add("region", std::to_string(me->region));
  if (replica) {
    add("shard", std::to_string(me->shard));
    add("replica", std::to_string(me->replica));
    add("workload", json_string(w->name()));
    add("execution_history", "{\"file\": " + json_string(hist) + ", \"events\": " +
                       std::to_string(replica->executor().history().size()) +
                       ", \"lines\": " + std::to_string(history_lines) + "}");
    add("counters", counters_json(replica->counters()));
  }
  add("process", process_facts(transport, loop, drain_timed_out));
  std::string js = prepend_fields(dump, fields);
  if (!write_file(out + "/" + name + ".state.json", js + "\n"))
    throw Fatal{1, "cannot write " + out + "/" + name + ".state.json"};
  return 0;
}

}  // namespace

int run_process(Role role, int argc, char** argv) {
  const char* prog = role == Role::Server ? "txn-server" : "txn-client";
  // Debian's abseil checks every mutex acquisition for lock-order cycles, a
  // debugging aid that costs CPU inside gRPC on every message.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
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
