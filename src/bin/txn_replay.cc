// txn-replay: serial re-execution of transactions with the real workload code,
// for the checker's replay check (docs/checker.md).
//
//   txn-replay --config DEPLOY.yml < ORDERED.jsonl
//
// Loads every shard as the servers did (same deployment, same seed), then
// executes the transactions on stdin (TxnLogEntry JSON lines, as clients write
// them) one after another, in the order given, each piece as soon as its inputs
// are known. Prints per transaction "t <txn_id> <outputs digest>", then per
// shard "s <shard> <state digest>", then "end <transactions>". Exit 2 with one
// line on stderr for bad arguments or input.
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
#include "core/workload.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "txn-replay: error: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace txn;
  const std::string usage = "usage: txn-replay --config DEPLOY.yml < ORDERED_TXNS.jsonl";
  std::string config;
  static const option opts[] = {{"config", required_argument, nullptr, 'c'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, nullptr)) != -1;) {
    if (c == 'c') config = optarg;
    else if (c == 'h') { std::cout << usage << "\n"; return 0; }
    else return fail("bad argument " + std::string(argv[optind - 1]) + "; " + usage);
  }
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
