// DAST's "TPC-A" (bench/tpca): three independent tables, zipf keys, forced IRT/CRT split.
#include <algorithm>
#include <cmath>

#include "workload/store.h"

namespace txn::wl {

ZipfSampler::ZipfSampler(double alpha, int64_t n) {
  if (!(alpha >= 0 && alpha <= 1)) throw ConfigError("workload.zipf: coefficient must be in [0, 1]");
  if (n < 1) throw ConfigError("workload.tpca_rows: need at least one row");
  cdf_.resize(static_cast<size_t>(n));
  double acc = 0;
  for (int64_t r = 0; r < n; ++r) cdf_[r] = acc += std::pow(static_cast<double>(r + 1), -alpha);
  for (auto& x : cdf_) x /= acc;
  cdf_.back() = 1.0;
}

int64_t ZipfSampler::operator()(std::mt19937_64& g) const {
  const double u = rand_unit(g);
  return std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
}

double ZipfSampler::pmf(int64_t r) const { return r == 0 ? cdf_[0] : cdf_[r] - cdf_[r - 1]; }

namespace {

constexpr uint32_t kUpdate = 1;
constexpr int64_t kInitialBalance = 1000000;   // every row starts here
constexpr int64_t kMaxDelta = 999999;          // delta uniform in [-999999, 999999] (TPC-A)

class Tpca : public Workload {
 public:
  explicit Tpca(const Deployment& d)
      : d_(d), rows_(std::max<int64_t>(100, std::llround(d.workload.tpca_rows * d.workload.scale))),
        zipf_(d.workload.zipf, rows_) {
    if (d.workload.tpca_crt_ratio < 0 || d.workload.tpca_crt_ratio > 1)
      throw ConfigError("workload.tpca_crt_ratio: must be in [0, 1]");
    if (rows_ < d.n_shards()) throw ConfigError("workload.tpca_rows: fewer rows than shards");
  }
  std::string name() const override { return "tpca"; }
  uint32_t n_types() const override { return 1; }
  std::string type_name(uint32_t t) const override { return t == 0 ? "tpca_payment" : "unknown"; }

  std::unique_ptr<ShardStore> load(uint32_t shard) const override {
    auto s = std::make_unique<TpcaStore>(shard);
    for (auto& t : s->table) {
      for (int64_t k = shard; k < rows_; k += d_.n_shards()) t.balance.emplace_hint(t.balance.end(), k, kInitialBalance);
      t.initial_sum = t.sum();
    }
    return s;
  }

  TxnRequest generate(std::mt19937_64& g, const ClientContext& ctx) const override {
    const uint32_t P = d_.n_shards(), home = ctx.home_shard, region = d_.region_of_shard(home);
    const bool want_crt = d_.regions > 1 && chance(g, d_.workload.tpca_crt_ratio);
    int64_t k[3];
    for (;;) {
      bool at_home = false, crt = false;
      for (auto& x : k) {
        x = zipf_(g);
        at_home |= x % P == home;
        crt |= d_.region_of_shard(static_cast<uint32_t>(x % P)) != region;
      }
      if (at_home && crt == want_crt) break;
    }
    const int64_t delta = rand_int(g, -kMaxDelta, kMaxDelta);
    TxnRequest t;
    t.set_type(0);
    t.set_home_shard(home);
    t.set_crt(want_crt);
    for (int i = 0; i < 3; ++i) {
      Piece* p = t.add_pieces();
      p->set_id(i);
      p->set_shard(static_cast<uint32_t>(k[i] % P));
      p->set_proc(kUpdate);
      (*p->mutable_args())["table"] = int_value(i);
      (*p->mutable_args())["key"] = int_value(k[i]);
      (*p->mutable_args())["delta"] = int_value(delta);
      const std::string key = std::string(TpcaStore::kTables[i]) + ":" + std::to_string(k[i]);
      p->add_read_keys(key);
      p->add_write_keys(key);
      p->add_outputs(std::string(TpcaStore::kTables[i]) + "_balance");
    }
    return t;
  }

  void execute(ShardStore& store, const Piece& p, const Vars& v, Vars* out) const override {
    auto* s = dynamic_cast<TpcaStore*>(&store);
    if (!s) throw BadMessage("tpca piece on a non-tpca store");
    if (p.proc() != kUpdate) throw BadMessage("tpca: unknown proc " + std::to_string(p.proc()));
    if (p.shard() != s->shard) throw BadMessage("piece for another shard");
    const int64_t tb = get_int(v, "table"), k = get_int(v, "key"), delta = get_int(v, "delta");
    if (tb < 0 || tb > 2) throw BadMessage("tpca: bad table");
    if (delta < -kMaxDelta || delta > kMaxDelta) throw BadMessage("tpca: delta out of range");
    TpcaTable& t = s->table[tb];
    auto it = t.balance.find(k);
    if (it == t.balance.end()) throw BadMessage("tpca: key not on this shard");
    s->undo.keep(it->second);
    s->undo.keep(t.applied_delta);
    s->undo.keep(t.applied_count);
    s->undo.keep(s->executed);
    it->second += delta;
    t.applied_delta += delta;
    t.applied_count += 1;
    ++s->executed;
    (*out)[std::string(TpcaStore::kTables[tb]) + "_balance"] = int_value(it->second);
  }

 private:
  Deployment d_;
  int64_t rows_;
  ZipfSampler zipf_;
};

}  // namespace

std::unique_ptr<Workload> make_tpca(const Deployment& d) { return std::make_unique<Tpca>(d); }

}  // namespace txn::wl
