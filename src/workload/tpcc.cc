// TPC-C after DAST's bench/tpcc (docs/workloads.md lists every deviation from the spec).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "workload/store.h"

namespace txn::wl {
namespace {

enum Type : uint32_t { kNewOrder, kPayment, kDelivery, kOrderStatus, kStockLevel, kNTypes };
enum Proc : uint32_t {
  kNoHome = 1, kNoStock, kPayWarehouse, kPayDistrict, kPayLookup, kPayCustomer, kPayHistory,
  kDelivery_, kOrderStatus_, kStockLevel_,
  kNoStocks   // New-Order's stock updates on one supplying shard, all of its lines (since 2026-11-28)
};
constexpr int64_t kCId = 259, kCLast = 223;   // NURand C constants (fixed: deterministic runs)

// A conflict key, "table:k1:k2...", written in place (a request holds dozens of them).
void key_part(std::string& s, const std::string& x) { s += x; }
template <class T>
void key_part(std::string& s, T x) {
  char b[24];
  s.append(b, std::to_chars(b, b + sizeof b, x).ptr);
}
template <class... T>
std::string key(const char* table, T... k) {
  std::string s = table;
  ((s += ':', key_part(s, k)), ...);
  return s;
}
std::string last_name(int64_t l) {
  char b[8];
  std::snprintf(b, sizeof b, "%03d", static_cast<int>(l));
  return b;
}

struct Builder {
  TxnRequest t;
  Piece* add(uint32_t shard, Proc proc) {
    Piece* p = t.add_pieces();
    p->set_id(static_cast<uint32_t>(t.pieces_size() - 1));
    p->set_shard(shard);
    p->set_proc(proc);
    return p;
  }
};
void arg(Piece* p, const std::string& k, int64_t v) { (*p->mutable_args())[k] = int_value(v); }

class Tpcc : public Workload {
 public:
  explicit Tpcc(const Deployment& d) : d_(d), c_(d.workload) {
    const double s = c_.scale;
    sz_.customers = static_cast<int32_t>(std::max<int64_t>(30, std::llround(3000 * s)));
    sz_.items = static_cast<int32_t>(std::max<int64_t>(100, std::llround(100000 * s)));
    sz_.orders = sz_.customers;
    double total = 0;
    for (double m : c_.mix) total += m;
    if (c_.mix.size() != kNTypes || total <= 0 ||
        std::any_of(c_.mix.begin(), c_.mix.end(), [](double m) { return m < 0; }))
      throw ConfigError("workload.mix: need 5 non-negative weights with a positive sum");
    if (c_.payment_crt_rate < -1 || c_.payment_crt_rate > 100)
      throw ConfigError("workload.payment_crt_rate: must be -1 or 0..100");
    if (c_.district != "fixed" && c_.district != "uniform")
      throw ConfigError("workload.district: must be fixed or uniform, got '" + c_.district + "'");
    uniform_district_ = c_.district == "uniform";
    double acc = 0;
    for (double m : c_.mix) cum_.push_back(acc += m / total);
  }
  std::string name() const override { return "tpcc"; }
  uint32_t n_types() const override { return kNTypes; }
  std::string type_name(uint32_t t) const override {
    static const char* n[] = {"new_order", "payment", "delivery", "order_status", "stock_level"};
    return t < kNTypes ? n[t] : "unknown";
  }
  std::unique_ptr<ShardStore> load(uint32_t shard) const override;
  TxnRequest generate(std::mt19937_64& g, const ClientContext& ctx) const override;
  void execute(ShardStore& store, const Piece& p, const Vars& v, Vars* out) const override;
  // Only the HISTORY insert: no TPC-C transaction reads HISTORY, which has no key.
  bool commutes(const Piece& p) const override { return p.proc() == kPayHistory; }

 private:
  uint32_t P() const { return d_.n_shards(); }
  uint32_t other_warehouse(std::mt19937_64& g, uint32_t home) const {
    auto w = static_cast<uint32_t>(rand_int(g, 0, P() - 2));
    return w >= home ? w + 1 : w;
  }
  std::vector<int32_t> name_matches(int64_t last) const {
    std::vector<int32_t> r;
    for (int64_t c = last; c < sz_.customers; c += 1000) r.push_back(static_cast<int32_t>(c));
    return r;
  }
  int64_t draw_last(std::mt19937_64& g) const {
    return nurand(g, 255, kCLast, 0, 999) % std::min<int64_t>(1000, sz_.customers);
  }
  int64_t draw_cid(std::mt19937_64& g) const { return nurand(g, 1023, kCId, 0, sz_.customers - 1); }
  void new_order(Builder& b, std::mt19937_64& g, uint32_t w, int32_t d) const;
  void payment(Builder& b, std::mt19937_64& g, uint32_t w, int32_t d) const;

  Deployment d_;
  WorkloadConfig c_;
  TpccSizes sz_;
  std::vector<double> cum_;
  bool uniform_district_ = false;
};

std::unique_ptr<ShardStore> Tpcc::load(uint32_t shard) const {
  auto st = std::make_unique<TpccStore>(shard, sz_);
  TpccStore& s = *st;
  std::mt19937_64 g(d_.seed * 0x9E3779B97F4A7C15ULL + shard + 1);
  std::mt19937_64 gi(d_.seed * 0x9E3779B97F4A7C15ULL);  // ITEM is identical on every shard
  s.w_name = "W" + std::to_string(shard);
  s.w_tax_bp = static_cast<int32_t>(rand_int(g, 0, 2000));
  // W_YTD and D_YTD equal the loaded HISTORY amounts (10.00 per customer), as
  // in the spec's population, scaled with the customers (3.3.2.8, 3.3.2.9).
  const int64_t h_load = 1000;
  s.w_ytd = h_load * sz_.customers * sz_.districts;
  s.item_price.resize(sz_.items);
  for (auto& p : s.item_price) p = rand_int(gi, 100, 10000);
  s.stock.resize(sz_.items);
  for (auto& x : s.stock) x.quantity = static_cast<int32_t>(rand_int(g, 10, 100));
  s.customer.resize(static_cast<size_t>(sz_.districts) * sz_.customers);
  const int32_t n_new = sz_.orders * 3 / 10, min_no = sz_.orders - n_new + 1;
  for (int32_t d = 0; d < sz_.districts; ++d) {
    s.district.push_back({"D" + std::to_string(shard) + "-" + std::to_string(d),
                          static_cast<int32_t>(rand_int(g, 0, 2000)), sz_.orders + 1, h_load * sz_.customers,
                          min_no - 1, 0});
    for (int32_t c = 0; c < sz_.customers; ++c) {
      Customer& cu = s.cust(d, c);
      cu.last = c % 1000;
      cu.bad_credit = c % 10 == 0;
      cu.discount_bp = static_cast<int32_t>(rand_int(g, 0, 5000));
      cu.balance = -h_load;
      cu.ytd_payment = h_load;
      cu.payment_cnt = 1;
      s.by_name[{d, cu.last}].push_back(c);
      s.history.push_back({c, d, static_cast<int32_t>(shard), d, h_load, ""});
    }
    std::vector<int32_t> perm(sz_.customers);
    for (int32_t i = 0; i < sz_.customers; ++i) perm[i] = i;
    for (int32_t i = sz_.customers - 1; i > 0; --i) std::swap(perm[i], perm[rand_int(g, 0, i)]);
    for (int32_t o = 1; o <= sz_.orders; ++o) {
      const bool delivered = o < min_no;
      Order ord{perm[o - 1], delivered ? static_cast<int32_t>(rand_int(g, 1, 10)) : 0,
                static_cast<int32_t>(rand_int(g, 5, 15)), true};
      s.cust(d, ord.c_id).last_o_id = o;
      for (int32_t l = 1; l <= ord.ol_cnt; ++l)
        s.order_line[{d, o, l}] = {static_cast<int32_t>(rand_int(g, 0, sz_.items - 1)),
                                   static_cast<int32_t>(shard), 5,
                                   delivered ? 0 : rand_int(g, 1, 999999), delivered};
      s.order[{d, o}] = ord;
      if (!delivered) s.new_order[{d, o}] = true;
    }
  }
  return st;
}

// ---- generation ------------------------------------------------------------------------

TxnRequest Tpcc::generate(std::mt19937_64& g, const ClientContext& ctx) const {
  const uint32_t w = ctx.home_shard;
  // District: fixed per coordinator (the artifact's way: concurrent coordinators
  // of a shard never share one) or drawn per transaction (TPC-C 2.4.1.2, 2.5.1.2).
  const int32_t d = uniform_district_ ? static_cast<int32_t>(rand_int(g, 0, sz_.districts - 1))
                                      : static_cast<int32_t>(ctx.client_index % sz_.districts);
  uint32_t type = kPayment;
  if (c_.payment_crt_rate < 0) {
    const double u = rand_unit(g);
    type = 0;
    while (type + 1 < kNTypes && u >= cum_[type]) ++type;
  }
  Builder b;
  b.t.set_type(type);
  b.t.set_home_shard(w);
  switch (type) {
    case kNewOrder: new_order(b, g, w, d); break;
    case kPayment: payment(b, g, w, d); break;
    case kDelivery: {
      Piece* p = b.add(w, kDelivery_);
      arg(p, "d", d);
      arg(p, "carrier", rand_int(g, 1, 10));
      p->add_outputs("delivered_o_id");
      for (const char* t : {"new_order", "order", "order_line", "customer"}) *p->add_write_keys() = key(t, w, d);
      break;
    }
    case kOrderStatus: {
      Piece* p = b.add(w, kOrderStatus_);
      arg(p, "d", d);
      p->add_read_keys(key("customer", w, d));
      if (chance(g, 0.6)) {
        const int64_t last = draw_last(g);
        arg(p, "c_last", last);
        p->add_read_keys(key("cust_name", w, d, last_name(last)));
        for (int32_t c : name_matches(last)) p->add_read_keys(key("customer", w, d, c));
      } else {
        const int64_t c = draw_cid(g);
        arg(p, "c_id", c);
        p->add_read_keys(key("customer", w, d, c));
      }
      for (const char* t : {"order", "order_line"}) p->add_read_keys(key(t, w, d));
      for (const char* o : {"os_c_id", "os_o_id", "os_balance"}) p->add_outputs(o);
      break;
    }
    case kStockLevel: {
      Piece* p = b.add(w, kStockLevel_);
      arg(p, "d", d);
      arg(p, "threshold", rand_int(g, 10, 20));
      p->add_read_keys(key("district", w, d));
      p->add_read_keys(key("order_line", w, d));
      p->add_write_keys(key("stock", w));   // coarse table lock (see docs/workloads.md)
      p->add_outputs("low_stock");
      break;
    }
  }
  bool crt = false;
  for (const auto& p : b.t.pieces())
    crt |= d_.region_of_shard(p.shard()) != d_.region_of_shard(w);
  b.t.set_crt(crt);
  return std::move(b.t);
}

void Tpcc::new_order(Builder& b, std::mt19937_64& g, uint32_t w, int32_t d) const {
  const int64_t c = draw_cid(g), n = rand_int(g, 6, 15);
  Piece* h = b.add(w, kNoHome);
  arg(h, "d", d);
  arg(h, "c_id", c);
  arg(h, "ol_cnt", n);
  h->add_read_keys(key("warehouse", w));
  h->add_read_keys(key("customer", w, d));
  h->add_read_keys(key("customer", w, d, c));
  h->add_read_keys(key("district", w, d));
  for (const char* t : {"district", "order", "new_order", "order_line"}) h->add_write_keys(key(t, w, d));
  h->add_outputs("o_id");
  h->add_outputs("total");
  struct Line { int64_t i, sw, q; std::string text; };
  std::vector<Line> lines;
  std::string packed;
  for (int64_t l = 0; l < n; ++l) {
    Line x{rand_int(g, 0, sz_.items - 1), w, rand_int(g, 1, 10), ""};
    if (P() > 1 && chance(g, c_.remote_item_prob)) x.sw = other_warehouse(g, w);
    x.text = std::to_string(x.i) + ':' + std::to_string(x.sw) + ':' + std::to_string(x.q);
    if (l) packed += ',';
    packed += x.text;
    h->add_read_keys(key("item", x.i));
    lines.push_back(std::move(x));
  }
  // The lines as one argument, "i:sw:q,..." (one map entry where three per line were: every copy, encoding and
  // lookup of the request is that much cheaper; docs/workloads.md).
  (*h->mutable_args())["lines"] = str_value(packed);
  // One stock-update piece per supplying shard (in the order the lines first name it), with its lines in the
  // home piece's form: a piece per line made an order of 10 lines 11 pieces, each copied, encoded and executed
  // apart (docs/workloads.md).
  struct Supply { int64_t sw; Piece* p; std::string lines; };
  std::vector<Supply> supplies;
  for (const auto& x : lines) {
    auto it = std::find_if(supplies.begin(), supplies.end(), [&](const Supply& y) { return y.sw == x.sw; });
    if (it == supplies.end()) {
      Piece* p = b.add(static_cast<uint32_t>(x.sw), kNoStocks);
      arg(p, "remote", x.sw != w);
      p->add_read_keys(key("stock", x.sw));
      it = supplies.insert(supplies.end(), {x.sw, p, ""});
    }
    if (!it->lines.empty()) it->lines += ',';
    it->lines += x.text;
    const std::string row = key("stock", x.sw, x.i);
    if (std::find(it->p->write_keys().begin(), it->p->write_keys().end(), row) != it->p->write_keys().end()) continue;
    it->p->add_read_keys(row);
    it->p->add_write_keys(row);
  }
  for (const Supply& y : supplies) (*y.p->mutable_args())["lines"] = str_value(y.lines);
}

void Tpcc::payment(Builder& b, std::mt19937_64& g, uint32_t w, int32_t d) const {
  const int64_t h = rand_int(g, 100, 500000);   // cents: [1.00, 5000.00]
  const bool by_name = chance(g, c_.by_name_prob);
  uint32_t cw = w;
  const uint32_t N = d_.shards_per_region, region = d_.region_of_shard(w);
  if (c_.payment_crt_rate < 0) {
    if (P() > 1 && chance(g, c_.remote_customer_prob)) cw = other_warehouse(g, w);
  } else if (d_.regions > 1 && chance(g, c_.payment_crt_rate / 100.0)) {
    do cw = other_warehouse(g, w); while (d_.region_of_shard(cw) == region);
  } else if (N > 1 && chance(g, 0.15)) {
    cw = region * N + static_cast<uint32_t>(rand_int(g, 0, N - 2));
    if (cw >= w) ++cw;
  }
  const int64_t cd = cw == w ? d : rand_int(g, 0, 9);
  Piece* p0 = b.add(w, kPayWarehouse);
  arg(p0, "h", h);
  p0->add_read_keys(key("warehouse", w));
  p0->add_write_keys(key("warehouse", w));
  p0->add_outputs("w_name");
  Piece* p1 = b.add(w, kPayDistrict);
  arg(p1, "d", d);
  arg(p1, "h", h);
  p1->add_read_keys(key("district", w, d));
  p1->add_write_keys(key("district", w, d));
  p1->add_outputs("d_name");
  std::vector<int32_t> cands;
  Piece* pc = nullptr;
  if (by_name) {
    const int64_t last = draw_last(g);
    cands = name_matches(last);
    Piece* pl = b.add(cw, kPayLookup);
    arg(pl, "c_d", cd);
    arg(pl, "c_last", last);
    pl->add_read_keys(key("cust_name", cw, cd, last_name(last)));
    pl->add_outputs("c_id");
    pc = b.add(cw, kPayCustomer);
    pc->add_inputs("c_id");
  } else {
    const int64_t c = draw_cid(g);
    cands = {static_cast<int32_t>(c)};
    pc = b.add(cw, kPayCustomer);
    arg(pc, "c_id", c);
  }
  arg(pc, "c_d", cd);
  arg(pc, "h", h);
  pc->add_read_keys(key("customer", cw, cd));
  for (int32_t c : cands) {
    pc->add_read_keys(key("customer", cw, cd, c));
    pc->add_write_keys(key("customer", cw, cd, c));
  }
  Piece* ph = b.add(w, kPayHistory);
  arg(ph, "d", d);
  arg(ph, "c_w", cw);
  arg(ph, "c_d", cd);
  arg(ph, "h", h);
  if (by_name) ph->add_inputs("c_id"); else arg(ph, "c_id", cands[0]);
  ph->add_inputs("w_name");
  ph->add_inputs("d_name");
  ph->add_write_keys(key("history", w));
}

// ---- execution -------------------------------------------------------------------------

// New-Order's lines, "i:sw:q,..." (Tpcc::new_order): exactly n of them, each field a decimal in its range
// (item 0..max_i, supplying warehouse 0..max_w, quantity 1..100; any number of them, at least one, for n < 0);
// anything else is a bad message.
std::vector<std::array<int64_t, 3>> order_lines(const std::string& text, int64_t n, int64_t max_i, int64_t max_w) {
  std::vector<std::array<int64_t, 3>> out;
  const char* p = text.data();
  const char* const end = p + text.size();
  const int64_t hi[3] = {max_i, max_w, 100}, lo[3] = {0, 0, 1};
  while (p < end || out.empty()) {
    std::array<int64_t, 3> line{};
    for (int f = 0; f < 3; ++f) {
      const auto [q, ec] = std::from_chars(p, end, line[f]);
      if (ec != std::errc() || q == p || line[f] < lo[f] || line[f] > hi[f])
        throw BadMessage("variable 'lines' malformed or out of range");
      p = q;
      if (f < 2) {
        if (p == end || *p != ':') throw BadMessage("variable 'lines' malformed");
        ++p;
      }
    }
    out.push_back(line);
    if (p == end) break;
    if (*p != ',' || ++p == end) throw BadMessage("variable 'lines' malformed");
  }
  if (n >= 0 && static_cast<int64_t>(out.size()) != n)
    throw BadMessage("variable 'lines' does not hold ol_cnt lines");
  return out;
}

int64_t in_range(const Vars& v, const char* n, int64_t lo, int64_t hi) {
  const int64_t x = get_int(v, n);
  if (x < lo || x > hi) throw BadMessage(std::string("variable '") + n + "' out of range");
  return x;
}

// One order line's stock update: quantity down by q, refilled by 91 when it would fall below 10 (TPC-C 2.4.2.2).
void update_stock(TpccStore& s, int64_t i, int64_t q, bool remote) {
  Stock& st = s.stock[i];
  s.undo.keep(st);
  st.quantity = static_cast<int32_t>(st.quantity >= q + 10 ? st.quantity - q : st.quantity - q + 91);
  st.ytd += static_cast<int32_t>(q);
  st.order_cnt += 1;
  st.remote_cnt += remote;
}

void Tpcc::execute(ShardStore& store, const Piece& p, const Vars& v, Vars* out) const {
  auto* sp = dynamic_cast<TpccStore*>(&store);
  if (!sp) throw BadMessage("tpcc piece on a non-tpcc store");
  TpccStore& s = *sp;
  if (p.shard() != s.shard) throw BadMessage("piece for shard " + std::to_string(p.shard()) +
                                             " executed on shard " + std::to_string(s.shard));
  const int32_t C = sz_.customers - 1, I = sz_.items - 1;
  auto D = [&] { return static_cast<int32_t>(in_range(v, "d", 0, sz_.districts - 1)); };
  switch (p.proc()) {
    case kNoHome: {
      const int32_t d = D(), c = static_cast<int32_t>(in_range(v, "c_id", 0, C));
      const int64_t n = in_range(v, "ol_cnt", 1, 15);
      std::vector<std::array<int64_t, 3>> lines;
      if (v.count("lines")) {
        lines = order_lines(get_str(v, "lines"), n, I, P() - 1);
      } else {   // a request of a run before 2026-11-27 (its transaction log, replayed): a field per entry
        for (int64_t l = 0; l < n; ++l) {
          const std::string k = std::to_string(l);
          lines.push_back({in_range(v, ("i" + k).c_str(), 0, I), in_range(v, ("sw" + k).c_str(), 0, P() - 1),
                           in_range(v, ("q" + k).c_str(), 1, 100)});
        }
      }
      District& dist = s.district[d];
      s.undo.keep(dist);
      const int32_t o = dist.next_o_id++;
      Customer& cu = s.cust(d, c);
      s.undo.keep(cu);
      Order ord{c, 0, static_cast<int32_t>(n), true};
      int64_t sum = 0;
      for (int64_t l = 0; l < n; ++l) {
        const auto& [i, sw, q] = lines[l];
        ord.all_local &= sw == s.shard;
        const int64_t amount = q * s.item_price[i];
        sum += amount;
        s.undo.keep_key(s.order_line, {d, o, static_cast<int32_t>(l + 1)});
        s.order_line[{d, o, static_cast<int32_t>(l + 1)}] =
            {static_cast<int32_t>(i), static_cast<int32_t>(sw), static_cast<int32_t>(q), amount, false};
      }
      s.undo.keep_key(s.order, {d, o});
      s.order[{d, o}] = ord;
      s.undo.keep_key(s.new_order, {d, o});
      s.new_order[{d, o}] = true;
      cu.last_o_id = o;
      (*out)["o_id"] = int_value(o);
      (*out)["total"] = int_value(sum * (10000 - cu.discount_bp) / 10000 *
                                  (10000 + s.w_tax_bp + dist.tax_bp) / 10000);
      break;
    }
    case kNoStock: {   // a request of a run before 2026-11-28 (its transaction log, replayed): a piece per line
      const int64_t i = in_range(v, "i_id", 0, I), q = in_range(v, "qty", 1, 100);
      update_stock(s, i, q, in_range(v, "remote", 0, 1));
      break;
    }
    case kNoStocks: {
      const bool remote = in_range(v, "remote", 0, 1);
      const auto lines = order_lines(get_str(v, "lines"), -1, I, P() - 1);
      for (const auto& [i, sw, q] : lines)
        if (sw != s.shard) throw BadMessage("variable 'lines' names another supplying shard");
      for (const auto& [i, sw, q] : lines) update_stock(s, i, q, remote);
      break;
    }
    case kPayWarehouse: {
      const int64_t h = in_range(v, "h", 0, 1000000000);
      s.undo.keep(s.w_ytd);
      s.w_ytd += h;
      (*out)["w_name"] = str_value(s.w_name);
      break;
    }
    case kPayDistrict: {
      const int32_t d = D();
      const int64_t h = in_range(v, "h", 0, 1000000000);
      s.undo.keep(s.district[d]);
      s.district[d].ytd += h;
      (*out)["d_name"] = str_value(s.district[d].name);
      break;
    }
    case kPayLookup: {
      const int32_t cd = static_cast<int32_t>(in_range(v, "c_d", 0, sz_.districts - 1));
      auto it = s.by_name.find({cd, static_cast<int32_t>(in_range(v, "c_last", 0, 999))});
      if (it == s.by_name.end()) throw BadMessage("no customer with that last name");
      (*out)["c_id"] = int_value(it->second[(it->second.size() - 1) / 2]);
      break;
    }
    case kPayCustomer: {
      const int32_t cd = static_cast<int32_t>(in_range(v, "c_d", 0, sz_.districts - 1));
      const int32_t c = static_cast<int32_t>(in_range(v, "c_id", 0, C));
      const int64_t h = in_range(v, "h", 0, 1000000000);
      Customer& cu = s.cust(cd, c);
      s.undo.keep(cu);
      cu.balance -= h;
      cu.ytd_payment += h;
      cu.payment_cnt += 1;
      break;
    }
    case kPayHistory: {
      const int32_t d = D(), cd = static_cast<int32_t>(in_range(v, "c_d", 0, sz_.districts - 1));
      const int32_t cw = static_cast<int32_t>(in_range(v, "c_w", 0, P() - 1));
      const int32_t c = static_cast<int32_t>(in_range(v, "c_id", 0, C));
      const int64_t h = in_range(v, "h", 0, 1000000000);
      std::string data = get_str(v, "w_name") + "    " + get_str(v, "d_name");
      s.undo.then([&s] { s.history.pop_back(); });
      s.history.push_back({c, cd, cw, d, h, std::move(data)});
      break;
    }
    case kDelivery_: {
      const int32_t d = D(), carrier = static_cast<int32_t>(in_range(v, "carrier", 1, 10));
      auto it = s.new_order.lower_bound({d, 0});
      if (it == s.new_order.end() || it->first.first != d) {
        (*out)["delivered_o_id"] = int_value(0);   // nothing to deliver: skipped (spec 2.7.4.2)
        break;
      }
      const int32_t o = it->first.second;
      s.undo.keep_key(s.new_order, it->first);
      s.new_order.erase(it);
      Order& ord = s.order.at({d, o});
      s.undo.keep(ord);
      ord.carrier = carrier;
      int64_t sum = 0;
      for (auto l = s.order_line.lower_bound({d, o, 0}); l != s.order_line.end() && l->first[0] == d &&
                                                         l->first[1] == o; ++l) {
        s.undo.keep(l->second);
        l->second.delivered = true;
        sum += l->second.amount;
      }
      Customer& cu = s.cust(d, ord.c_id);
      s.undo.keep(cu);
      cu.balance += sum;
      cu.delivery_cnt += 1;
      s.undo.keep(s.district[d]);
      s.district[d].deliveries += 1;
      (*out)["delivered_o_id"] = int_value(o);
      break;
    }
    case kOrderStatus_: {
      const int32_t d = D();
      int32_t c;
      if (v.count("c_last")) {
        auto it = s.by_name.find({d, static_cast<int32_t>(in_range(v, "c_last", 0, 999))});
        if (it == s.by_name.end()) throw BadMessage("no customer with that last name");
        c = it->second[(it->second.size() - 1) / 2];
      } else {
        c = static_cast<int32_t>(in_range(v, "c_id", 0, C));
      }
      const Customer& cu = s.cust(d, c);
      (*out)["os_c_id"] = int_value(c);
      (*out)["os_o_id"] = int_value(cu.last_o_id);
      (*out)["os_balance"] = int_value(cu.balance);
      break;
    }
    case kStockLevel_: {
      const int32_t d = D();
      const int64_t th = in_range(v, "threshold", 0, 1000);
      const int32_t next = s.district[d].next_o_id;
      std::set<int32_t> low;
      for (auto l = s.order_line.lower_bound({d, std::max(0, next - 20), 0});
           l != s.order_line.end() && l->first[0] == d && l->first[1] < next; ++l)
        if (s.stock[l->second.i_id].quantity < th) low.insert(l->second.i_id);
      (*out)["low_stock"] = int_value(static_cast<int64_t>(low.size()));
      break;
    }
    default:
      throw BadMessage("tpcc: unknown proc " + std::to_string(p.proc()));
  }
  s.undo.keep(s.executed);
  ++s.executed;
}

}  // namespace

std::unique_ptr<Workload> make_tpcc(const Deployment& d) { return std::make_unique<Tpcc>(d); }

}  // namespace txn::wl
