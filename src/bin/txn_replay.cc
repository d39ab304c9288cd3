// txn-replay: serial re-execution of transactions with the real workload code,
// for the checker's replay check (docs/checker.md).
//
//   txn-replay --config DEPLOY.yml < ORDERED.jsonl
//   txn-replay --dump LOG.txns.pb.gz...
//
// Loads every shard as the servers did (same deployment, same seed), then
// executes the transactions on stdin (TxnLogEntry JSON lines, as clients write
// them) one after another, in the order given, each piece as soon as its inputs
// are known. Prints per transaction "t <txn_id> <outputs digest>", then per
// shard "s <shard> <state digest>", then "end <transactions>". Exit 2 with one
// line on stderr for bad arguments or input.
//
// --dump prints client transaction logs (binary, core/txn_log.h) as those JSON
// lines, one per entry, in the files' order: how the checker and people read them.
// An entry's outputs (workloads that log them: append) print as a map of
// Values, e.g. "outputs":{"r0_0":{"s":"0"}}; a set oneof member is printed
// even when it holds its type's default.
#include <getopt.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/executor.h"
#include "core/txn_log.h"
#include "core/workload.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "txn-replay: error: %s\n", msg.c_str());
  return 2;
}

int dump(char** paths, int n) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  std::string line, out;
  for (int i = 0; i < n; ++i) {
    std::string bad;
    std::string err = txn::read_txn_log(paths[i], [&](const txn::TxnLogEntry& e) {
      line.clear();
      auto st = google::protobuf::util::MessageToJsonString(e, &line, opt);
      if (!st.ok() && bad.empty()) bad = std::string(st.message());
      out += line;
      out += '\n';
      if (out.size() > (1 << 16)) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    });
    if (err.empty() && !bad.empty()) err = std::string(paths[i]) + ": " + bad;
    std::fwrite(out.data(), 1, out.size(), stdout);
    out.clear();
    if (!err.empty()) {
      std::fflush(stdout);
      return fail(err);
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace txn;
  const std::string usage =
      "usage: txn-replay --config DEPLOY.yml < ORDERED_TXNS.jsonl | txn-replay --dump CLIENT.txns.pb.gz...";
  std::string config;
  bool dumping = false;
  static const option opts[] = {{"config", required_argument, nullptr, 'c'},
                                {"dump", no_argument, nullptr, 'd'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'c') config = optarg;
    else if (c == 'd') dumping = true;
    else if (c == 'h') { std::cout << usage << "\n"; return 0; }
    else return fail("bad argument " + std::string(argv[optind - 1]) + "; " + usage);
  }
  if (dumping) return config.empty() && optind < argc ? dump(argv + optind, argc - optind) : fail(usage);
  if (config.empty() || optind < argc) return fail(usage);

  Deployment d;
  std::unique_ptr<Workload> w;
  std::vector<std::unique_ptr<ShardStore>> stores;
  try {
    d = load_deployment(config);
    w = make_workload(d);
    for (uint32_t s = 0; s < d.n_shards(); ++s) stores.push_back(w->load(s));
  } catch (const ConfigError& e) {
    return fail(e.what());
  }

  // Parsing the JSON is most of the work: it runs on every core, the execution
  // (in the order given) on one.
  std::ios::sync_with_stdio(false);
  std::vector<std::string> lines;
  for (std::string line; std::getline(std::cin, line);)
    if (!line.empty()) lines.push_back(std::move(line));
  std::vector<TxnLogEntry> entries(lines.size());
  std::vector<std::string> bad(lines.size());
  const size_t workers = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), 8));
  std::vector<std::thread> pool;
  for (size_t k = 0; k < workers; ++k)
    pool.emplace_back([&, k] {
      google::protobuf::util::JsonParseOptions popt;
      for (size_t i = k; i < lines.size(); i += workers) {
        auto st = google::protobuf::util::JsonStringToMessage(lines[i], &entries[i], popt);
        if (!st.ok()) bad[i] = std::string(st.message());
      }
    });
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < bad.size(); ++i)
    if (!bad[i].empty()) return fail("transaction " + std::to_string(i + 1) + " on stdin: " + bad[i]);

  std::string out;
  std::vector<std::string> errors;
  for (const auto& e : entries) {
    errors.clear();
    Vars produced = execute_serially(*w, stores, e.txn(), &errors);
    out += "t " + std::to_string(e.txn().txn_id()) + " " + outputs_digest(produced) + "\n";
    if (out.size() > (1 << 16)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  const uint64_t n = entries.size();
  for (uint32_t s = 0; s < d.n_shards(); ++s)
    out += "s " + std::to_string(s) + " " + stores[s]->digest() + "\n";
  out += "end " + std::to_string(n) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
