// List-append, after Elle (Kingsbury & Alvaro, VLDB 2020): a few hot lists per
// shard; each transaction reads some of them and appends unique values to
// others, and returns what it read. The final lists give every key's version
// order, the reads place each transaction in it, so the checker can classify
// isolation anomalies (docs/workloads.md).
#include <algorithm>
#include <sstream>

#include "workload/store.h"

namespace txn::wl {
namespace {

constexpr uint32_t kOps = 1;
constexpr int64_t kMaxValue = (int64_t{1} << 62) - 1;   // appended values are uniform in [1, 2^62)
constexpr int64_t kMaxOpsPerPiece = 4;
constexpr int64_t kMaxPieces = 3;

struct Op {
  bool read = false;
  int64_t index = 0;   // the key's index i on its shard (global key shard + P*i)
  int64_t value = 0;   // appends
};

std::string key_name(int64_t g) { return "l" + std::to_string(g); }

// A decimal number without sign or leading zeros, at most `max`; -1 if `s` is not one.
int64_t parse_number(const std::string& s, size_t from, int64_t max) {
  if (from >= s.size() || (s[from] == '0' && s.size() - from > 1)) return -1;
  int64_t v = 0;
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    const int d = s[i] - '0';
    if (v > (max - d) / 10) return -1;
    v = v * 10 + d;
  }
  return v;
}

template <class T>
void check_range(const char* key, T v, T lo, T hi) {
  if (v >= lo && v <= hi) return;
  std::ostringstream o;
  o << key << ": " << v << " out of range [" << lo << ", " << hi << "]";
  throw ConfigError(o.str());
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + 1) parts.push_back(s.substr(from, at - from));
  parts.push_back(s.substr(from));
  return parts;
}

class Append : public Workload {
 public:
  explicit Append(const Deployment& d)
      : regions_(d.regions), per_region_(d.shards_per_region), shards_(d.n_shards()),
        keys_(d.workload.append_keys), tail_(d.workload.append_read_tail), crt_ratio_(d.workload.append_crt_ratio) {
    // As validate() words it: deployments built in code may not have been validated.
    check_range("workload.append_keys", keys_, int64_t{1}, int64_t{100000});
    check_range("workload.append_crt_ratio", crt_ratio_, 0.0, 1.0);
    check_range("workload.append_read_tail", tail_, int64_t{0}, int64_t{64});
  }
  std::string name() const override { return "append"; }
  uint32_t n_types() const override { return 1; }
  std::string type_name(uint32_t t) const override { return t == 0 ? "append" : "unknown"; }
  bool log_outputs() const override { return true; }

  std::unique_ptr<ShardStore> load(uint32_t shard) const override {
    return std::make_unique<AppendStore>(shard, shards_, keys_);
  }

  TxnRequest generate(std::mt19937_64& g, const ClientContext& ctx) const override {
    const uint32_t home = ctx.home_shard, region = home / per_region_;
    const bool want_crt = regions_ > 1 && chance(g, crt_ratio_);
    int64_t k = rand_int(g, 1, kMaxPieces);
    std::vector<uint32_t> shards{home};
    auto fresh = [&](uint32_t s) { return std::find(shards.begin(), shards.end(), s) == shards.end(); };
    if (want_crt) {
      k = std::min<int64_t>(std::max<int64_t>(k, 2), shards_);
      // One shard of another region (uniform among them), then any shards.
      const int64_t other = rand_int(g, 0, shards_ - per_region_ - 1);
      shards.push_back(static_cast<uint32_t>(other < region * per_region_ ? other : other + per_region_));
      while (static_cast<int64_t>(shards.size()) < k) {
        const auto s = static_cast<uint32_t>(rand_int(g, 0, shards_ - 1));
        if (fresh(s)) shards.push_back(s);
      }
    } else {
      k = std::min<int64_t>(k, per_region_);
      while (static_cast<int64_t>(shards.size()) < k) {
        const auto s = static_cast<uint32_t>(region * per_region_ + rand_int(g, 0, per_region_ - 1));
        if (fresh(s)) shards.push_back(s);
      }
    }
    TxnRequest t;
    t.set_type(0);
    t.set_home_shard(home);
    t.set_crt(want_crt);
    for (size_t i = 0; i < shards.size(); ++i) {
      Piece* p = t.add_pieces();
      p->set_id(static_cast<uint32_t>(i));
      p->set_shard(shards[i]);
      p->set_proc(kOps);
      std::string ops;
      std::vector<std::string> reads, writes;
      const int64_t n = rand_int(g, 1, kMaxOpsPerPiece);
      for (int64_t j = 0; j < n; ++j) {
        const std::string key = key_name(shards[i] + static_cast<int64_t>(shards_) * rand_int(g, 0, keys_ - 1));
        const bool read = chance(g, 0.5);
        if (!ops.empty()) ops += ';';
        auto& keys = read ? reads : writes;
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
        if (read) {
          ops += "r " + key;
          p->add_outputs("r" + std::to_string(i) + "_" + std::to_string(j));
        } else {
          ops += "a " + key + " " + std::to_string(rand_int(g, 1, kMaxValue));
        }
      }
      (*p->mutable_args())["ops"] = str_value(ops);
      for (const auto& key : reads) p->add_read_keys(key);
      for (const auto& key : writes) p->add_write_keys(key);
    }
    return t;
  }

  void execute(ShardStore& store, const Piece& p, const Vars& v, Vars* out) const override {
    auto* s = dynamic_cast<AppendStore*>(&store);
    if (!s) throw BadMessage("append piece on a non-append store");
    if (p.proc() != kOps) throw BadMessage("append: unknown proc " + std::to_string(p.proc()));
    if (p.shard() != s->shard) throw BadMessage("piece for another shard");
    const std::vector<Op> ops = parse(get_str(v, "ops"), *s);   // all of them first: a bad op changes nothing
    const std::string prefix = "r" + std::to_string(p.id()) + "_";
    for (size_t j = 0; j < ops.size(); ++j) {
      const Op& op = ops[j];
      if (!op.read) {
        s->append(op.index, op.value);
        continue;
      }
      const auto& l = s->list(op.index);
      std::string r = std::to_string(l.size());
      const size_t m = std::min(l.size(), static_cast<size_t>(tail_));
      for (size_t x = l.size() - m; x < l.size(); ++x) r += (x == l.size() - m ? ":" : ",") + std::to_string(l[x]);
      (*out)[prefix + std::to_string(j)] = str_value(r);
    }
    s->undo.keep(s->executed);
    ++s->executed;
  }

 private:
  // "r <key>" | "a <key> <value>", separated by ';', every key on this shard.
  std::vector<Op> parse(const std::string& text, const AppendStore& s) const {
    std::vector<Op> ops;
    for (const auto& item : split(text, ';')) {
      const std::vector<std::string> w = split(item, ' ');
      Op op;
      op.read = w[0] == "r";
      if (!(op.read ? w.size() == 2 : w[0] == "a" && w.size() == 3))
        throw BadMessage("append: malformed op '" + item + "'");
      const int64_t g = w[1].size() > 1 && w[1][0] == 'l' ? parse_number(w[1], 1, INT64_MAX) : -1;
      if (g < 0) throw BadMessage("append: malformed key '" + w[1] + "'");
      if (g % shards_ != s.shard || g / shards_ >= s.keys())
        throw BadMessage("append: key " + w[1] + " is not on shard " + std::to_string(s.shard));
      op.index = g / shards_;
      if (!op.read) {
        op.value = parse_number(w[2], 0, kMaxValue);
        if (op.value < 1) throw BadMessage("append: value '" + w[2] + "' not in [1, 2^62)");
      }
      ops.push_back(op);
    }
    return ops;
  }

  uint32_t regions_, per_region_, shards_;
  int64_t keys_, tail_;
  double crt_ratio_;
};

}  // namespace

std::unique_ptr<Workload> make_append(const Deployment& d) { return std::make_unique<Append>(d); }

}  // namespace txn::wl
