#include "workload/store.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace txn::wl {

std::string Fnv::hex() const {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}

int64_t get_int(const Vars& v, const char* name) {
  auto it = v.find(name);
  if (it == v.end()) throw BadMessage(std::string("missing variable '") + name + "'");
  if (it->second.v_case() != Value::kI) throw BadMessage(std::string("variable '") + name + "' is not an integer");
  return it->second.i();
}

std::string get_str(const Vars& v, const char* name) {
  auto it = v.find(name);
  if (it == v.end()) throw BadMessage(std::string("missing variable '") + name + "'");
  if (it->second.v_case() != Value::kS) throw BadMessage(std::string("variable '") + name + "' is not a string");
  return it->second.s();
}

std::string money(int64_t cents) {
  char b[32];
  std::snprintf(b, sizeof b, "%s%" PRId64 ".%02" PRId64, cents < 0 ? "-" : "",
                (cents < 0 ? -cents : cents) / 100, (cents < 0 ? -cents : cents) % 100);
  return b;
}

// ---- TPC-C ---------------------------------------------------------------------------

std::string TpccStore::digest() const {
  Fnv f;
  f.s(w_name); f.i(w_tax_bp); f.i(w_ytd);
  for (const auto& d : district) {
    f.s(d.name); f.i(d.tax_bp); f.i(d.next_o_id); f.i(d.ytd); f.i(d.delivered_at_load); f.i(d.deliveries);
  }
  for (const auto& c : customer) {
    f.i(c.last); f.i(c.bad_credit); f.i(c.discount_bp); f.i(c.balance); f.i(c.ytd_payment);
    f.i(c.payment_cnt); f.i(c.delivery_cnt); f.i(c.last_o_id);
  }
  // HISTORY has no key and no order (TPC-C 1.3): hash it as a multiset, so
  // replicas that appended the same rows in different orders agree.
  uint64_t rows = 0;
  for (const auto& h : history) {
    Fnv r;
    r.i(h.c_id); r.i(h.c_d); r.i(h.c_w); r.i(h.d); r.i(h.amount); r.s(h.data);
    rows += r.h;
  }
  f.i(static_cast<int64_t>(history.size()));
  f.i(static_cast<int64_t>(rows));
  f.i(static_cast<int64_t>(order.size()));
  for (const auto& [k, o] : order) { f.i(k.first); f.i(k.second); f.i(o.c_id); f.i(o.carrier); f.i(o.ol_cnt); f.i(o.all_local); }
  f.i(static_cast<int64_t>(new_order.size()));
  for (const auto& [k, _] : new_order) { f.i(k.first); f.i(k.second); }
  f.i(static_cast<int64_t>(order_line.size()));
  for (const auto& [k, l] : order_line) {
    for (auto x : k) f.i(x);
    f.i(l.i_id); f.i(l.supply_w); f.i(l.qty); f.i(l.amount); f.i(l.delivered);
  }
  for (auto p : item_price) f.i(p);
  for (const auto& s : stock) { f.i(s.quantity); f.i(s.ytd); f.i(s.order_cnt); f.i(s.remote_cnt); }
  return f.hex();
}

std::vector<DistrictAgg> TpccStore::aggregates() const {
  std::vector<DistrictAgg> out;
  std::vector<int64_t> h_by_district(district.size(), 0);
  for (const auto& h : history)
    if (h.d >= 0 && h.d < static_cast<int32_t>(district.size())) h_by_district[h.d] += h.amount;
  for (int32_t d = 0; d < static_cast<int32_t>(district.size()); ++d) {
    DistrictAgg a;
    a.d_id = d;
    a.d_ytd = district[d].ytd;
    a.d_next_o_id = district[d].next_o_id;
    a.sum_h_amount = h_by_district[d];
    a.delivered_at_load = district[d].delivered_at_load;
    a.deliveries = district[d].deliveries;
    std::vector<int64_t> delivered_amount(sz.customers, 0);   // per customer of this district
    auto lo = order.lower_bound({d, 0}), hi = order.lower_bound({d + 1, 0});
    auto line = order_line.lower_bound({d, 0, 0});
    for (auto it = lo; it != hi; ++it) {
      const int32_t o = it->first.second;
      const Order& ord = it->second;
      a.max_o_id = o;
      a.sum_ol_cnt += ord.ol_cnt;
      ++a.o_count;
      a.o_null_carrier += ord.carrier == 0;
      int64_t lines = 0;
      for (; line != order_line.end() && line->first[0] == d && line->first[1] < o; ++line) {}
      for (; line != order_line.end() && line->first[0] == d && line->first[1] == o; ++line) {
        ++lines;
        a.ol_delivery_mismatch += line->second.delivered != (ord.carrier != 0);
        if (line->second.delivered) {
          a.sum_delivered_ol_amount += line->second.amount;
          if (ord.c_id >= 0 && ord.c_id < sz.customers) delivered_amount[ord.c_id] += line->second.amount;
        }
      }
      a.ol_cnt_mismatch += lines != ord.ol_cnt;
    }
    auto nlo = new_order.lower_bound({d, 0}), nhi = new_order.lower_bound({d + 1, 0});
    for (auto it = nlo; it != nhi; ++it) {
      if (a.no_count++ == 0) a.min_no_o_id = it->first.second;
      a.max_no_o_id = it->first.second;
      auto o = order.find(it->first);
      a.no_with_carrier += o == order.end() || o->second.carrier != 0;
    }
    if (a.no_count == 0) {   // empty NEW-ORDER: report an empty range so 3.3.2.3 holds vacuously
      a.min_no_o_id = a.d_next_o_id;
      a.max_no_o_id = a.d_next_o_id - 1;
    }
    auto llo = order_line.lower_bound({d, 0, 0}), lhi = order_line.lower_bound({d + 1, 0, 0});
    for (auto it = llo; it != lhi; ++it) ++a.ol_count;
    for (int32_t c = 0; c < sz.customers; ++c) {
      const Customer& cu = customer[static_cast<size_t>(d) * sz.customers + c];
      a.sum_c_balance += cu.balance;
      a.c_balance_mismatch += cu.balance + cu.ytd_payment != delivered_amount[c];
    }
    out.push_back(a);
  }
  return out;
}

std::map<std::pair<int32_t, int32_t>, int64_t> TpccStore::history_by_customer_district() const {
  std::map<std::pair<int32_t, int32_t>, int64_t> m;
  for (const auto& h : history) m[{h.c_w, h.c_d}] += h.amount;
  return m;
}

std::string TpccStore::dump_json() const {
  std::ostringstream o;
  int64_t sum_h = 0;
  for (const auto& h : history) sum_h += h.amount;
  o << "{\"shard\": " << shard << ", \"workload\": \"tpcc\", \"digest\": \"" << digest() << "\", "
    << "\"rows\": {\"warehouse\": 1, \"district\": " << district.size()
    << ", \"customer\": " << customer.size() << ", \"history\": " << history.size()
    << ", \"order\": " << order.size() << ", \"new_order\": " << new_order.size()
    << ", \"order_line\": " << order_line.size() << ", \"item\": " << item_price.size()
    << ", \"stock\": " << stock.size() << "}, \"executed_pieces\": " << executed
    << ", \"tpcc\": {\"warehouses\": [{\"w_id\": " << shard << ", \"w_ytd\": " << money(w_ytd)
    << ", \"sum_h_amount\": " << money(sum_h) << ", \"h_by_customer_district\": {";
  bool first = true;
  for (const auto& [k, v] : history_by_customer_district()) {
    o << (first ? "" : ", ") << "\"" << k.first << ":" << k.second << "\": " << money(v);
    first = false;
  }
  o << "}, \"districts\": [";
  first = true;
  for (const auto& a : aggregates()) {
    o << (first ? "" : ", ") << "{\"d_id\": " << a.d_id << ", \"d_ytd\": " << money(a.d_ytd)
      << ", \"d_next_o_id\": " << a.d_next_o_id << ", \"max_o_id\": " << a.max_o_id
      << ", \"max_no_o_id\": " << a.max_no_o_id << ", \"min_no_o_id\": " << a.min_no_o_id
      << ", \"no_count\": " << a.no_count << ", \"sum_ol_cnt\": " << a.sum_ol_cnt
      << ", \"ol_count\": " << a.ol_count << ", \"o_count\": " << a.o_count
      << ", \"o_null_carrier\": " << a.o_null_carrier << ", \"no_with_carrier\": " << a.no_with_carrier
      << ", \"ol_cnt_mismatch\": " << a.ol_cnt_mismatch << ", \"ol_delivery_mismatch\": " << a.ol_delivery_mismatch
      << ", \"sum_h_amount\": " << money(a.sum_h_amount) << ", \"delivered_at_load\": " << a.delivered_at_load
      << ", \"deliveries\": " << a.deliveries << ", \"sum_c_balance\": " << money(a.sum_c_balance)
      << ", \"sum_delivered_ol_amount\": " << money(a.sum_delivered_ol_amount)
      << ", \"c_balance_mismatch\": " << a.c_balance_mismatch << "}";
    first = false;
  }
  o << "]}]}}";
  return o.str();
}


// A snapshot holds every field the digest covers, and the derived index (by_name) is rebuilt from the customers.
bool TpccStore::encode(std::string* out) const {
  Writer w(out);
  w.i(shard); w.i(sz.districts); w.i(sz.customers); w.i(sz.items); w.i(sz.orders);
  w.i(static_cast<int64_t>(executed)); w.s(w_name); w.i(w_tax_bp); w.i(w_ytd);
  w.i(static_cast<int64_t>(district.size()));
  for (const auto& d : district) {
    w.s(d.name); w.i(d.tax_bp); w.i(d.next_o_id); w.i(d.ytd); w.i(d.delivered_at_load); w.i(d.deliveries);
  }
  w.i(static_cast<int64_t>(customer.size()));
  for (const auto& c : customer) {
    w.i(c.last); w.i(c.bad_credit); w.i(c.discount_bp); w.i(c.balance); w.i(c.ytd_payment);
    w.i(c.payment_cnt); w.i(c.delivery_cnt); w.i(c.last_o_id);
  }
  w.i(static_cast<int64_t>(history.size()));
  for (const auto& h : history) { w.i(h.c_id); w.i(h.c_d); w.i(h.c_w); w.i(h.d); w.i(h.amount); w.s(h.data); }
  w.i(static_cast<int64_t>(order.size()));
  for (const auto& [k, o] : order) {
    w.i(k.first); w.i(k.second); w.i(o.c_id); w.i(o.carrier); w.i(o.ol_cnt); w.i(o.all_local);
  }
  w.i(static_cast<int64_t>(new_order.size()));
  for (const auto& [k, v] : new_order) { w.i(k.first); w.i(k.second); w.i(v); }
  w.i(static_cast<int64_t>(order_line.size()));
  for (const auto& [k, l] : order_line) {
    for (auto x : k) w.i(x);
    w.i(l.i_id); w.i(l.supply_w); w.i(l.qty); w.i(l.amount); w.i(l.delivered);
  }
  w.i(static_cast<int64_t>(item_price.size()));
  for (auto p : item_price) w.i(p);
  w.i(static_cast<int64_t>(stock.size()));
  for (const auto& st : stock) { w.i(st.quantity); w.i(st.ytd); w.i(st.order_cnt); w.i(st.remote_cnt); }
  return true;
}

bool TpccStore::decode(const std::string& in) {
  Reader r(in);
  TpccStore t(shard, sz);
  const auto i32 = [&r] { return static_cast<int32_t>(r.i()); };
  if (r.i() != shard || r.i() != sz.districts || r.i() != sz.customers || r.i() != sz.items || r.i() != sz.orders)
    return false;
  t.executed = static_cast<uint64_t>(r.i()); t.w_name = r.s(); t.w_tax_bp = i32(); t.w_ytd = r.i();
  t.district.resize(r.n(6 * 8));
  for (auto& d : t.district) {
    d.name = r.s(); d.tax_bp = i32(); d.next_o_id = i32(); d.ytd = r.i(); d.delivered_at_load = i32();
    d.deliveries = i32();
  }
  t.customer.resize(r.n(8 * 8));
  for (auto& c : t.customer) {
    c.last = i32(); c.bad_credit = r.i() != 0; c.discount_bp = i32(); c.balance = r.i(); c.ytd_payment = r.i();
    c.payment_cnt = i32(); c.delivery_cnt = i32(); c.last_o_id = i32();
  }
  t.history.resize(r.n(6 * 8));
  for (auto& h : t.history) { h.c_id = i32(); h.c_d = i32(); h.c_w = i32(); h.d = i32(); h.amount = r.i(); h.data = r.s(); }
  for (size_t k = r.n(6 * 8); k > 0; --k) {
    const int32_t a = i32(), b = i32();
    Order& o = t.order[{a, b}];
    o.c_id = i32(); o.carrier = i32(); o.ol_cnt = i32(); o.all_local = r.i() != 0;
  }
  for (size_t k = r.n(3 * 8); k > 0; --k) {
    const int32_t a = i32(), b = i32();
    t.new_order[{a, b}] = r.i() != 0;
  }
  for (size_t k = r.n(8 * 8); k > 0; --k) {
    std::array<int32_t, 3> key{i32(), i32(), i32()};
    OrderLine& l = t.order_line[key];
    l.i_id = i32(); l.supply_w = i32(); l.qty = i32(); l.amount = r.i(); l.delivered = r.i() != 0;
  }
  t.item_price.resize(r.n(8));
  for (auto& p : t.item_price) p = r.i();
  t.stock.resize(r.n(4 * 8));
  for (auto& st : t.stock) { st.quantity = i32(); st.ytd = i32(); st.order_cnt = i32(); st.remote_cnt = i32(); }
  if (!r.ok() || t.customer.size() != static_cast<size_t>(sz.districts) * static_cast<size_t>(sz.customers)) return false;
  for (int32_t d = 0; d < sz.districts; ++d)
    for (int32_t c = 0; c < sz.customers; ++c) t.by_name[{d, t.cust(d, c).last}].push_back(c);
  *this = std::move(t);
  return true;
}

// ---- TPC-A ---------------------------------------------------------------------------

int64_t TpcaTable::sum() const {
  int64_t s = 0;
  for (const auto& [_, b] : balance) s += b;
  return s;
}

std::string TpcaStore::digest() const {
  Fnv f;
  for (const auto& t : table) {
    f.i(static_cast<int64_t>(t.balance.size()));
    for (const auto& [k, b] : t.balance) { f.i(k); f.i(b); }
  }
  return f.hex();
}

std::string TpcaStore::dump_json() const {
  std::ostringstream o;
  o << "{\"shard\": " << shard << ", \"workload\": \"tpca\", \"digest\": \"" << digest()
    << "\", \"rows\": {";
  for (int i = 0; i < 3; ++i) o << (i ? ", " : "") << "\"" << kTables[i] << "\": " << table[i].balance.size();
  o << "}, \"executed_pieces\": " << executed << ", \"tpca\": {\"tables\": {";
  for (int i = 0; i < 3; ++i) {
    const auto& t = table[i];
    o << (i ? ", " : "") << "\"" << kTables[i] << "\": {\"sum\": " << t.sum()
      << ", \"initial_sum\": " << t.initial_sum << ", \"applied_delta\": " << t.applied_delta
      << ", \"applied_count\": " << t.applied_count << "}";
  }
  o << "}}}";
  return o.str();
}


bool TpcaStore::encode(std::string* out) const {
  Writer w(out);
  w.i(shard);
  w.i(static_cast<int64_t>(executed));
  for (const auto& t : table) {
    w.i(t.initial_sum); w.i(t.applied_delta); w.i(t.applied_count);
    w.i(static_cast<int64_t>(t.balance.size()));
    for (const auto& [k, b] : t.balance) { w.i(k); w.i(b); }
  }
  return true;
}

bool TpcaStore::decode(const std::string& in) {
  Reader r(in);
  TpcaStore s(shard);
  if (r.i() != shard) return false;
  s.executed = static_cast<uint64_t>(r.i());
  for (auto& t : s.table) {
    t.initial_sum = r.i(); t.applied_delta = r.i(); t.applied_count = r.i();
    for (size_t k = r.n(16); k > 0; --k) {
      const int64_t key = r.i();
      t.balance[key] = r.i();
    }
  }
  if (!r.ok()) return false;
  *this = std::move(s);
  return true;
}

// ---- list-append ---------------------------------------------------------------------

AppendStore::AppendStore(uint32_t shard, uint32_t n_shards, int64_t keys) : shard(shard), n_shards(n_shards) {
  lists_.reserve(static_cast<size_t>(keys));
  for (int64_t i = 0; i < keys; ++i) lists_.push_back(std::make_shared<std::vector<int64_t>>());
}

void AppendStore::append(int64_t i, int64_t v) {
  auto& l = lists_[static_cast<size_t>(i)];
  if (l.use_count() > 1) l = std::make_shared<std::vector<int64_t>>(*l);   // shared with a clone: copy first
  undo.then([this, i] { lists_[static_cast<size_t>(i)]->pop_back(); });
  l->push_back(v);
}

std::string AppendStore::digest() const {
  Fnv f;
  f.i(keys());
  for (const auto& l : lists_) {
    f.i(static_cast<int64_t>(l->size()));
    for (int64_t v : *l) f.i(v);
  }
  return f.hex();
}

std::string AppendStore::dump_json() const {
  size_t elements = 0;
  for (const auto& l : lists_) elements += l->size();
  std::ostringstream o;
  o << "{\"shard\": " << shard << ", \"workload\": \"append\", \"digest\": \"" << digest()
    << "\", \"rows\": {\"lists\": " << lists_.size() << ", \"elements\": " << elements
    << "}, \"executed_pieces\": " << executed << ", \"append\": {\"lists\": {";
  for (int64_t i = 0; i < keys(); ++i) {
    o << (i ? ", " : "") << "\"l" << global_key(i) << "\": [";
    const auto& l = list(i);
    for (size_t k = 0; k < l.size(); ++k) o << (k ? ", " : "") << l[k];
    o << "]";
  }
  o << "}}}";
  return o.str();
}


bool AppendStore::encode(std::string* out) const {
  Writer w(out);
  w.i(shard); w.i(n_shards); w.i(static_cast<int64_t>(executed)); w.i(keys());
  for (const auto& l : lists_) {
    w.i(static_cast<int64_t>(l->size()));
    for (int64_t v : *l) w.i(v);
  }
  return true;
}

bool AppendStore::decode(const std::string& in) {
  Reader r(in);
  if (r.i() != shard || r.i() != n_shards) return false;
  const uint64_t ex = static_cast<uint64_t>(r.i());
  std::vector<std::shared_ptr<std::vector<int64_t>>> lists(r.n(8));
  if (lists.size() != lists_.size()) return false;
  for (auto& l : lists) {
    l = std::make_shared<std::vector<int64_t>>(r.n(8));
    for (auto& v : *l) v = r.i();
  }
  if (!r.ok()) return false;
  executed = ex;
  lists_ = std::move(lists);
  return true;
}

}  // namespace txn::wl
