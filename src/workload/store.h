// In-memory shard stores for TPC-C, TPC-A and list-append plus small shared helpers
// (deterministic RNG draws, FNV-1a hashing, argument access).
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/workload.h"

namespace txn::wl {

// ---- deterministic draws (portable: no std::*_distribution) ----------------
inline int64_t rand_int(std::mt19937_64& g, int64_t lo, int64_t hi) {  // inclusive
  return lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo + 1));
}
inline double rand_unit(std::mt19937_64& g) { return (g() >> 11) * (1.0 / 9007199254740992.0); }
inline bool chance(std::mt19937_64& g, double p) { return rand_unit(g) < p; }
inline int64_t nurand(std::mt19937_64& g, int64_t a, int64_t c, int64_t x, int64_t y) {
  return (((rand_int(g, 0, a) | rand_int(g, x, y)) + c) % (y - x + 1)) + x;
}

// ---- FNV-1a 64 -----------------------------------------------------------------
struct Fnv {
  uint64_t h = 1469598103934665603ULL;
  void bytes(const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ULL; }
  }
  void i(int64_t v) { bytes(&v, sizeof v); }
  void s(const std::string& v) { i(static_cast<int64_t>(v.size())); bytes(v.data(), v.size()); }
  std::string hex() const;
};

// ---- piece argument access (throws BadMessage, never crashes) ---------------------
int64_t get_int(const Vars& v, const char* name);
std::string get_str(const Vars& v, const char* name);
inline Value int_value(int64_t x) { Value v; v.set_i(x); return v; }
inline Value str_value(const std::string& x) { Value v; v.set_s(x); return v; }
std::string money(int64_t cents);   // "123.45"

// ---- trial execution (ShardStore::begin_trial) -------------------------------------------
// What a trial changed, undone in reverse by rollback(). A store's mutations call keep() (a field or row about to
// change in place: its old value), keep_key() (a map entry about to be inserted, replaced or erased) or then()
// (any other undo, e.g. popping an appended row) before they change anything; outside a trial these do nothing.
class UndoLog {
 public:
  UndoLog() = default;
  UndoLog(const UndoLog&) {}   // a copy of a store starts with no trial (the undos point into the original)
  UndoLog& operator=(const UndoLog&) { return *this; }
  bool start() {
    on_ = true;
    return true;
  }
  void rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
    undo_.clear();
    on_ = false;
  }
  template <class T>
  void keep(T& x) {
    if (on_) undo_.emplace_back([&x, old = x]() mutable { x = std::move(old); });
  }
  template <class M>
  void keep_key(M& m, const typename M::key_type& k) {
    if (!on_) return;
    auto it = m.find(k);
    if (it == m.end()) undo_.emplace_back([&m, k] { m.erase(k); });
    else undo_.emplace_back([&m, k, old = it->second]() mutable { m[k] = std::move(old); });
  }
  void then(std::function<void()> f) {
    if (on_) undo_.push_back(std::move(f));
  }

 private:
  bool on_ = false;
  std::vector<std::function<void()>> undo_;
};

// ---- snapshots (ShardStore::encode/decode) -------------------------------------------
// A store's state as bytes: fixed-width little-endian integers and length-prefixed strings, read back in the same
// order. A Reader that runs past its end or is left with bytes over is not ok().
class Writer {
 public:
  explicit Writer(std::string* out) : o_(out) {}
  void i(int64_t v) { o_->append(reinterpret_cast<const char*>(&v), sizeof v); }
  void s(const std::string& v) {
    i(static_cast<int64_t>(v.size()));
    o_->append(v);
  }

 private:
  std::string* o_;
};
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  int64_t i() {
    int64_t v = 0;
    if (at_ + sizeof v > in_.size()) {
      bad_ = true;
      return 0;
    }
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  // A count of items that each take at least `least` bytes: 0 (and not ok) when there cannot be that many.
  size_t n(size_t least = 1) {
    const int64_t v = i();
    if (v < 0 || static_cast<uint64_t>(v) > (in_.size() - at_) / std::max<size_t>(least, 1)) {
      bad_ = true;
      return 0;
    }
    return static_cast<size_t>(v);
  }
  std::string s() {
    const size_t len = n();
    std::string v = bad_ ? std::string() : in_.substr(at_, len);
    at_ += bad_ ? 0 : len;
    return v;
  }
  bool ok() const { return !bad_ && at_ == in_.size(); }

 private:
  const std::string& in_;
  size_t at_ = 0;
  bool bad_ = false;
};

// ---- TPC-C -------------------------------------------------------------------------
// One warehouse per shard (w_id = shard). Money is int64 cents, tax in basis points.
// d_id, c_id, i_id are 0-based; o_id is 1-based (d_next_o_id starts at orders+1).
struct TpccSizes {
  int32_t districts = 10, customers = 30, items = 100, orders = 30;
};
struct Customer {
  int32_t last = 0;            // c_last as a number (c_id % 1000); printed as 3 digits
  bool bad_credit = false;
  int32_t discount_bp = 0;
  int64_t balance = 0, ytd_payment = 0;
  int32_t payment_cnt = 0, delivery_cnt = 0;
  int32_t last_o_id = 0;       // most recent order (0: none)
};
struct Order { int32_t c_id = 0, carrier = 0, ol_cnt = 0; bool all_local = true; };
struct OrderLine { int32_t i_id = 0, supply_w = 0, qty = 0; int64_t amount = 0; bool delivered = false; };
struct Stock { int32_t quantity = 0, ytd = 0, order_cnt = 0, remote_cnt = 0; };
struct History { int32_t c_id, c_d, c_w, d; int64_t amount; std::string data; };
struct District {
  std::string name;
  int32_t tax_bp = 0, next_o_id = 1;
  int64_t ytd = 0;
  int32_t delivered_at_load = 0;   // orders loaded as delivered (3.3.2.11's constant, scaled)
  int32_t deliveries = 0;          // Delivery executions that delivered an order here
};

// Per district: what TPC-C's consistency conditions 3.3.2.1-3.3.2.12 need
// (docs/checker.md). Money in cents.
struct DistrictAgg {
  int32_t d_id = 0;
  int64_t d_ytd = 0;
  int64_t d_next_o_id = 0, max_o_id = 0, max_no_o_id = 0, min_no_o_id = 0, no_count = 0, sum_ol_cnt = 0,
          ol_count = 0;
  int64_t o_count = 0;                 // rows in ORDER
  int64_t o_null_carrier = 0;          // orders without a carrier (3.3.2.5)
  int64_t no_with_carrier = 0;         // NEW-ORDER rows whose order has a carrier or is missing (3.3.2.5)
  int64_t ol_cnt_mismatch = 0;         // orders whose o_ol_cnt differs from their ORDER-LINE rows (3.3.2.6)
  int64_t ol_delivery_mismatch = 0;    // lines delivered iff their order has no carrier (3.3.2.7)
  int64_t sum_h_amount = 0;            // HISTORY rows of this district (h_w_id, h_d_id) (3.3.2.9)
  int64_t delivered_at_load = 0, deliveries = 0;  // 3.3.2.11
  int64_t sum_c_balance = 0;           // customers of this district (3.3.2.10, summed)
  int64_t sum_delivered_ol_amount = 0; // delivered lines of this district's orders (3.3.2.10)
  int64_t c_balance_mismatch = 0;      // customers with c_balance + c_ytd_payment != delivered amount (3.3.2.12)
};

class TpccStore : public ShardStore {
 public:
  TpccStore(uint32_t shard, TpccSizes sz) : shard(shard), sz(sz) {}
  std::string digest() const override;
  std::string dump_json() const override;
  std::unique_ptr<ShardStore> clone() const override { return std::make_unique<TpccStore>(*this); }
  bool encode(std::string* out) const override;
  bool decode(const std::string& in) override;
  bool begin_trial() override { return undo.start(); }
  void end_trial() override { undo.rollback(); }
  std::vector<DistrictAgg> aggregates() const;
  // HISTORY amounts stored here, by the paying customer's (c_w_id, c_d_id) (3.3.2.10).
  std::map<std::pair<int32_t, int32_t>, int64_t> history_by_customer_district() const;

  uint32_t shard;
  TpccSizes sz;
  uint64_t executed = 0;
  std::string w_name;
  int32_t w_tax_bp = 0;
  int64_t w_ytd = 0;
  std::vector<District> district;
  std::vector<Customer> customer;                        // index d * customers + c
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> by_name;  // (d, last) -> c_ids (derived)
  std::vector<History> history;                          // append-only bag (digest ignores order)
  std::map<std::pair<int32_t, int32_t>, Order> order;    // (d, o_id)
  std::map<std::pair<int32_t, int32_t>, bool> new_order; // (d, o_id) -> present
  std::map<std::array<int32_t, 3>, OrderLine> order_line;  // (d, o_id, ol_number)
  std::vector<int64_t> item_price;                       // ITEM, replicated on every shard
  std::vector<Stock> stock;                              // by i_id

  Customer& cust(int32_t d, int32_t c) { return customer[static_cast<size_t>(d) * sz.customers + c]; }
  UndoLog undo;   // a trial's changes (not part of the state; a copy starts with none)
};

// ---- TPC-A -------------------------------------------------------------------------
struct TpcaTable {
  std::map<int64_t, int64_t> balance;   // key -> balance (keys with key % P == shard)
  int64_t initial_sum = 0, applied_delta = 0, applied_count = 0;
  int64_t sum() const;
};
class TpcaStore : public ShardStore {
 public:
  explicit TpcaStore(uint32_t shard) : shard(shard) {}
  std::string digest() const override;
  std::string dump_json() const override;
  std::unique_ptr<ShardStore> clone() const override { return std::make_unique<TpcaStore>(*this); }
  bool encode(std::string* out) const override;
  bool decode(const std::string& in) override;
  bool begin_trial() override { return undo.start(); }
  void end_trial() override { undo.rollback(); }
  static constexpr const char* kTables[3] = {"customer", "teller", "branch"};
  uint32_t shard;
  uint64_t executed = 0;
  std::array<TpcaTable, 3> table;
  UndoLog undo;
};

// ---- list-append (Elle) ---------------------------------------------------------------
// One list of int64 per key; key i of shard s is the global key g = s + P*i ("l<g>"),
// i in [0, keys). Lists are shared between a store and its clones until either
// appends (copy on write), so clone() costs the number of keys, not the elements.
class AppendStore : public ShardStore {
 public:
  AppendStore(uint32_t shard, uint32_t n_shards, int64_t keys);
  std::string digest() const override;
  std::string dump_json() const override;
  std::unique_ptr<ShardStore> clone() const override { return std::make_unique<AppendStore>(*this); }
  bool encode(std::string* out) const override;
  bool decode(const std::string& in) override;
  bool begin_trial() override { return undo.start(); }
  void end_trial() override { undo.rollback(); }
  int64_t keys() const { return static_cast<int64_t>(lists_.size()); }
  int64_t global_key(int64_t i) const { return shard + static_cast<int64_t>(n_shards) * i; }
  const std::vector<int64_t>& list(int64_t i) const { return *lists_[static_cast<size_t>(i)]; }
  void append(int64_t i, int64_t v);
  uint32_t shard, n_shards;
  uint64_t executed = 0;
  UndoLog undo;

 private:
  std::vector<std::shared_ptr<std::vector<int64_t>>> lists_;   // by i
};

std::unique_ptr<Workload> make_tpcc(const Deployment& d);
std::unique_ptr<Workload> make_tpca(const Deployment& d);
std::unique_ptr<Workload> make_append(const Deployment& d);

// Zipf(alpha, n) over ranks 0..n-1 (rank 0 hottest): precomputed CDF + binary search.
class ZipfSampler {
 public:
  ZipfSampler(double alpha, int64_t n);   // throws ConfigError unless 0 <= alpha <= 1, n >= 1
  int64_t operator()(std::mt19937_64& g) const;
  double pmf(int64_t rank) const;
  int64_t n() const { return static_cast<int64_t>(cdf_.size()); }
 private:
  std::vector<double> cdf_;
};

}  // namespace txn::wl
