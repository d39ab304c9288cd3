#include "core/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "workload/store.h"

namespace txn {

// `make mutants` (tests/mutants/README.md): -DMUTANT=recovery.snapshot_skips_written compiles this file with
// RECOVERY_MUTANT_SNAPSHOT_SKIPS_WRITTEN.
#ifdef RECOVERY_MUTANT_SNAPSHOT_SKIPS_WRITTEN
constexpr bool kSnapshotSkipsWritten = true;   // a snapshot leaves out the first line of the history written to disk
                                               // (a catch-up from a log truncated before its follower held it)
#else
constexpr bool kSnapshotSkipsWritten = false;
#endif

ShardExecutor::ShardExecutor(const Workload& w, uint32_t shard) : w_(w), shard_(shard), store_(w.load(shard)) {}

void ShardExecutor::execute(uint64_t txn_id, const Piece& p, const Vars& in, Vars* out, bool deferred,
                            const OrderKey& key) {
  history_.push_back(ExecEvent{txn_id, p.id(), deferred, key});
  if (tap_) {
    recovery::Event& e = tapped_.emplace_back();
    e.set_txn(txn_id);
    if (auto d = deps_.find(txn_id); d != deps_.end()) {
      e.set_deps_set(true);   // a follower declares them as this replica did (the first declaration stands)
      for (uint64_t x : d->second) e.add_deps(x);
    }
    *e.mutable_piece() = p;
    *e.mutable_in() = in;
    e.set_deferred(deferred);
    if (key.set) {
      e.set_key_set(true);
      e.set_key_domain(key.domain);
      e.set_key_hi(key.hi);
      e.set_key_lo(key.lo);
    }
  }
  w_.execute(*store_, p, in, out);
  if (file_ && history_.size() >= 2 * keep_) spill();
}

bool ShardExecutor::snapshot(recovery::Snapshot* out) const {
  out->set_shard(shard_);
  if (!store_->encode(out->mutable_store())) return false;
  if (written_ > 0) {   // its first events: their lines' bytes in its file, fetched by the peer afterwards
    file_->out.flush();
    const std::streamoff end = file_->out.tellp();
    if (!file_->out || end < static_cast<std::streamoff>(file_->header_bytes)) return false;
    uint64_t skipped = 0;   // (mutant) the events of the file's first line, which read_written then leaves out
    if (kSnapshotSkipsWritten) {
      std::ifstream in(file_->path + ".part");
      std::string line, txn, ids;
      while (std::getline(in, line) && (line[0] == '#' || (std::istringstream(line) >> txn >> ids, ids == "="))) {
      }
      std::istringstream one(line);
      skipped = parse_lines(one, [](const ExecEvent&) {});
    }
    out->set_written_events(written_ - skipped);
    out->set_written_begin(file_->header_bytes);
    out->set_written_end(static_cast<uint64_t>(end));
  }
  out->mutable_history()->Reserve(static_cast<int>(history_.size()));
  for (const ExecEvent& e : history_) {
    recovery::Done* d = out->add_history();
    d->set_txn(e.txn);
    d->set_piece(e.piece);
    d->set_deferred(e.deferred);
    if (e.key.set) {
      d->set_key_set(true);
      d->set_key_domain(e.key.domain);
      d->set_key_hi(e.key.hi);
      d->set_key_lo(e.key.lo);
    }
  }
  for (const auto& [txn, deps] : deps_) {
    recovery::Deps* d = out->add_deps();
    d->set_txn(txn);
    for (uint64_t x : deps) d->add_deps(x);
  }
  return true;
}

bool ShardExecutor::install(const recovery::Snapshot& s) {
  if (events() != 0 || s.shard() != shard_) return false;
  std::unique_ptr<ShardStore> st = w_.load(shard_);
  if (!st->decode(s.store())) return false;
  store_ = std::move(st);
  // its source's written events come afterwards (take_written): counted now, so that the events that follow in
  // memory are numbered as at the source
  written_ = awaiting_ = s.written_events();
  fetched_.clear();
  for (const recovery::Deps& d : s.deps()) declare_deps(d.txn(), {d.deps().begin(), d.deps().end()});
  for (const recovery::Done& d : s.history()) {
    history_.push_back(ExecEvent{d.txn(), d.piece(), d.deferred(),
                                 d.key_set() ? order_key(d.key_domain(), d.key_hi(), d.key_lo()) : OrderKey{}});
    if (file_ && history_.size() >= 2 * keep_) spill();
  }
  return true;
}

namespace {
// The first declaration of `txn_id` in `into` stands (a transaction's dependencies are final once committed; a
// replica votes once); kept as sorted, distinct ids.
void declare_ids(std::unordered_map<uint64_t, std::vector<uint64_t>>& into, uint64_t txn_id,
                 const std::vector<uint64_t>& ids) {
  auto [it, fresh] = into.try_emplace(txn_id, ids);
  if (!fresh) return;
  std::sort(it->second.begin(), it->second.end());
  it->second.erase(std::unique(it->second.begin(), it->second.end()), it->second.end());
}
}  // namespace

void ShardExecutor::forget(uint64_t txn_id) {
  for (auto* m : {&quorums_, &accepted_, &votes_, &deps_, &vote_epochs_}) m->erase(txn_id);
  for (auto* m : {&quorum_epochs_, &vote_marks_}) m->erase(txn_id);
}

void ShardExecutor::noted(uint64_t txn_id) {
  if (file_) declared_at_.emplace_back(txn_id, events());
}

void ShardExecutor::declare_deps(uint64_t txn_id, const std::vector<uint64_t>& deps) {
  if (!deps_.count(txn_id)) noted(txn_id);
  declare_ids(deps_, txn_id, deps);
}

void ShardExecutor::declare_vote(uint64_t txn_id, const std::vector<uint64_t>& deps, bool marked, uint64_t epoch) {
  const bool first = !votes_.count(txn_id);
  if (first) {
    noted(txn_id);
    if (marked) vote_marks_.try_emplace(txn_id, events());
  }
  declare_ids(votes_, txn_id, deps);
  // Cast again (a coordinator that asked again): a decision may count either cast, so the history names both epochs.
  auto e = vote_epochs_.find(txn_id);
  if (e != vote_epochs_.end()) {
    if (e->second.back() < epoch) e->second.push_back(epoch);
  } else if (epoch > 0) {
    vote_epochs_[txn_id] = first ? std::vector<uint64_t>{epoch} : std::vector<uint64_t>{0, epoch};
  }
}

void ShardExecutor::declare_quorum(uint64_t txn_id, const std::vector<uint32_t>& replicas,
                                   const std::vector<uint32_t>* accepted, uint64_t epoch) {
  if (quorums_.count(txn_id)) return;
  noted(txn_id);
  declare_ids(quorums_, txn_id, std::vector<uint64_t>(replicas.begin(), replicas.end()));
  if (accepted) declare_ids(accepted_, txn_id, std::vector<uint64_t>(accepted->begin(), accepted->end()));
  if (epoch > 0) quorum_epochs_[txn_id] = epoch;
}

void ShardExecutor::declare_quorum_masks(uint64_t txn_id, uint32_t replicas, uint32_t accepted, uint64_t epoch) {
  const auto bits = [](uint32_t mask) {
    std::vector<uint32_t> out;
    for (uint32_t r = 0; r < 32; ++r)
      if (mask >> r & 1u) out.push_back(r);
    return out;
  };
  const std::vector<uint32_t> acc = bits(accepted);
  declare_quorum(txn_id, bits(replicas), accepted ? &acc : nullptr, epoch);
}

bool ShardExecutor::evaluate(const TxnRequest& t, Vars* vars) const {
  std::set<std::string> produced;  // by this shard's pieces, available to its later ones
  for (const auto& p : t.pieces())
    if (p.shard() == shard_) {
      for (const auto& v : p.inputs())
        if (!vars->count(v) && !produced.count(v)) return false;
      produced.insert(p.outputs().begin(), p.outputs().end());
    }
  // A trial on the store itself, undone after (its cost is what the pieces change), or else a copy of it.
  struct Trial {
    ShardStore* s = nullptr;
    ~Trial() {
      if (s) s->end_trial();
    }
  } trial;
  std::unique_ptr<ShardStore> copy;
  ShardStore* on = store_.get();
  if (store_->begin_trial()) {
    trial.s = on;
  } else {
    copy = store_->clone();
    if (!copy) throw std::logic_error("workload " + w_.name() + ": its store cannot be copied for evaluation");
    on = copy.get();
  }
  for (const auto& p : t.pieces()) {
    if (p.shard() != shard_) continue;
    Vars scratch, out;
    const Vars* in = piece_vars(p, *vars, &scratch, true);
    try {
      w_.execute(*on, p, *in, &out);
    } catch (const BadMessage&) {
      // rejected: skipped, as a replica executing it skips it
    }
    for (const auto& [k, v] : out) (*vars)[k] = v;
  }
  return true;
}

namespace {
// "3", "0-4", "0-2,7": ascending piece ids with runs collapsed.
void write_ids(std::ostream& o, const std::vector<uint32_t>& ids) {
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) o << ',';
    o << ids[i];
    if (j > i) o << '-' << ids[j];
    i = j + 1;
  }
}
}  // namespace

// One line per run of consecutive events of one transaction with one deferred
// flag and one order key: "<txn id> <piece ids>" plus " d" when deferred, plus
// " k=<domain>:<hi>.<lo>" (decimal) when the key is set, plus " v=<ids>" (this
// replica's vote) and " p=<ids>" (its declared dependencies), comma-separated,
// possibly none, on the transaction's first line when the protocol declared them; " qe=<epoch>" after q= (and a=)
// and " e=<epochs>" after v= when the decision's votes, or this replica's vote, were of an epoch above 0 (a rejoin's;
// every epoch the vote was cast in, ascending: a vote cast again in a later epoch, the same, names both).
// Piece ids keep their execution order; only ascending runs are collapsed.
bool ShardExecutor::write_tokens(std::ostream& o, uint64_t txn, bool forget) {
  auto ids_out = [&o](const char* tag, const std::vector<uint64_t>& v) {
    o << tag;
    for (size_t k = 0; k < v.size(); ++k) o << (k ? "," : "") << v[k];
  };
  bool any = false;
  if (auto q = quorums_.find(txn); q != quorums_.end()) {
    ids_out(" q=", q->second);
    if (auto a = accepted_.find(txn); a != accepted_.end()) ids_out(" a=", a->second);
    if (auto e = quorum_epochs_.find(txn); e != quorum_epochs_.end()) o << " qe=" << e->second;
    any = true;
  }
  if (auto v = votes_.find(txn); v != votes_.end()) {
    auto m = vote_marks_.find(txn);
    ids_out(m == vote_marks_.end() ? " v=" : (" v=" + std::to_string(m->second) + "/").c_str(), v->second);
    if (auto e = vote_epochs_.find(txn); e != vote_epochs_.end()) ids_out(" e=", e->second);
    any = true;
  }
  if (auto d = deps_.find(txn); d != deps_.end()) {
    ids_out(" p=", d->second);
    any = true;
  }
  if (any && forget) this->forget(txn);
  return any;
}

size_t ShardExecutor::write_lines(std::ostream& o, size_t n, std::unordered_set<uint64_t>* once, bool forget) {
  size_t lines = 0;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < n;) {
    const ExecEvent& first = history_[i];
    ids.clear();
    size_t j = i;
    for (; j < n && history_[j].txn == first.txn && history_[j].deferred == first.deferred &&
           history_[j].key == first.key;
         ++j)
      ids.push_back(history_[j].piece);
    o << first.txn << ' ';
    // Collapse only where the ids really ascend, so the order stays readable back.
    bool ascending = std::is_sorted(ids.begin(), ids.end()) &&
                     std::adjacent_find(ids.begin(), ids.end()) == ids.end();
    if (ascending) {
      write_ids(o, ids);
    } else {
      for (size_t k = 0; k < ids.size(); ++k) o << (k ? "," : "") << ids[k];
    }
    if (first.deferred) o << " d";
    if (first.key.set) o << " k=" << first.key.domain << ':' << first.key.hi << '.' << first.key.lo;
    if (!once || once->insert(first.txn).second) write_tokens(o, first.txn, forget);
    o << '\n';
    ++lines;
    i = j;
  }
  return lines;
}

size_t ShardExecutor::write_history(std::ostream& o, const std::string& node) const {
  o << "# txn-history v1 node=" << node << " shard=" << shard_ << "\n";
  std::unordered_set<uint64_t> once;   // transactions whose declarations are written (on their first line)
  // const: nothing is forgotten (forget = false)
  const size_t lines = const_cast<ShardExecutor*>(this)->write_lines(o, history_.size(), &once, false);
  o << "# end events=" << history_.size() << " lines=" << lines << "\n";
  return lines;
}

namespace {
// "<txn> =" and its declarations, a line of its own in `f`, where it has any (`tokens` writes them, and says so).
template <class Tokens>
void declaration_line(HistoryFile& f, uint64_t txn, Tokens tokens) {
  std::ostringstream line;
  line << txn << " =";
  if (!tokens(line)) return;
  f.out << line.str() << '\n';
  ++f.lines;
}
}  // namespace

bool ShardExecutor::stream_to(std::shared_ptr<HistoryFile> f, size_t keep) {
  file_ = std::move(f);
  keep_ = std::max<size_t>(keep, 1);
  if (file_->out.is_open()) file_->out.close();
  file_->out.open(file_->path + ".part", std::ios::out | std::ios::trunc);
  file_->lines = 0;
  written_ = 0;
  declared_at_.clear();
  if (!file_->out) return false;
  const std::string header = "# txn-history v1 node=" + file_->node + " shard=" + std::to_string(shard_) + "\n";
  file_->out << header;
  file_->header_bytes = header.size();
  spill();
  return static_cast<bool>(file_->out);
}

// Every event but the last `keep_` goes to the file (its transaction's declarations so far on its first line,
// and forgotten); a declaration made 2 x keep_ events ago and still here (its transaction executed before,
// or never here) gets a line of its own.
void ShardExecutor::spill() {
  if (awaiting_ > 0) return;   // its source's written events are to be its file's first lines
  if (history_.size() > keep_) {
    size_t n = history_.size() - keep_;
    while (n < history_.size() && history_[n].txn == history_[n - 1].txn) ++n;   // a transaction's run stays whole
    file_->lines += write_lines(file_->out, n, nullptr, true);
    history_.erase(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(n));
    written_ += n;
  }
  std::unordered_set<uint64_t> here;   // transactions with an event still in memory: declared on their line
  while (!declared_at_.empty() && declared_at_.front().second + 2 * keep_ <= events()) {
    const uint64_t t = declared_at_.front().first;
    declared_at_.pop_front();
    if (here.empty())
      for (const ExecEvent& e : history_) here.insert(e.txn);
    if (!here.count(t)) declaration_line(*file_, t, [&](std::ostream& o) { return write_tokens(o, t, true); });
  }
}

bool ShardExecutor::finish_history(std::string* err) {
  if (!file_) {
    *err = "no history file";
    return false;
  }
  if (awaiting_ > 0) {
    *err = "its history's first " + std::to_string(awaiting_) + " events, still to come from its source, are missing";
    return false;
  }
  const bool spilled = written_ > 0;
  file_->lines += write_lines(file_->out, history_.size(), nullptr, true);
  written_ += history_.size();
  history_.clear();
  // What is declared still: of a transaction that never executed here (not written, as write_history does), or,
  // once lines went out before, maybe of one whose line is written already (a line of its own).
  if (spilled)
    for (const auto& [t, _] : declared_at_)
      declaration_line(*file_, t, [&](std::ostream& o) { return write_tokens(o, t, true); });
  declared_at_.clear();
  file_->out << "# end events=" << written_ << " lines=" << file_->lines << "\n";
  file_->out.close();
  if (!file_->out) {
    *err = "cannot write " + file_->path + ".part";
    return false;
  }
  if (std::rename((file_->path + ".part").c_str(), file_->path.c_str()) != 0) {
    *err = "cannot rename " + file_->path + ".part";
    return false;
  }
  return true;
}

// The file's lines in bytes [offset, end), about max_bytes of them (a restarted peer's snapshot's first events, a
// chunk at a time), as "<txn> <pieces> [d] [k=...] [p=...]": this replica's own tokens (its votes, the replicas its
// decisions counted) left out, and the declaration lines ("<txn> = ...") too. The file only grows (a snapshot's
// bytes stay as they are) until a restarted replica takes over another state (stream_to starts it anew), after
// which its server answers no Fetch of the earlier state's followers.
bool ShardExecutor::read_written(uint64_t offset, uint64_t end, size_t max_bytes, std::string* text, uint64_t* next,
                                 uint64_t* events) const {
  text->clear();
  *events = 0;
  if (!file_ || offset < file_->header_bytes || offset > end) return false;
  file_->out.flush();
  std::ifstream in(file_->path + ".part", std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset) - 1);
  if (!in || in.get() != '\n') return false;   // not the start of a line
  uint64_t at = offset;
  std::string line, tok;
  bool first = offset == file_->header_bytes;   // (the mutant's)
  while (at < end && text->size() < max_bytes) {
    if (!std::getline(in, line) || in.eof()) return false;   // the file is shorter, or its last line unfinished
    at += line.size() + 1;
    if (at > end) return false;   // a line across `end`: not a snapshot's bytes
    std::istringstream f(line);
    std::string txn, ids;
    if (!(f >> txn >> ids)) return false;
    if (ids == "=") continue;
    if (kSnapshotSkipsWritten && std::exchange(first, false)) continue;   // (mutant) its first events' line
    *text += txn + ' ' + ids;
    while (f >> tok)
      if (tok == "d" || tok.rfind("k=", 0) == 0 || tok.rfind("p=", 0) == 0) *text += ' ' + tok;
    *text += '\n';
  }
  std::istringstream again(*text);
  if (!text->empty()) *events = parse_lines(again, [](const ExecEvent&) {});
  *next = at;
  return true;
}

bool ShardExecutor::take_written(const std::string& text, uint64_t events) {
  if (events > awaiting_) return false;
  std::istringstream in(text);
  if (file_) {   // straight to its own file, as its source's lines
    if (parse_lines(in, [](const ExecEvent&) {}) != events) return false;
    file_->out << text;
    file_->lines += static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  } else {       // (a simulated replica keeps it all in memory)
    if (parse_lines(in, [this](const ExecEvent& e) { fetched_.push_back(e); }) != events) return false;
  }
  awaiting_ -= events;
  if (awaiting_ == 0) {
    if (file_) {
      spill();   // what it executed meanwhile, after them
    } else {
      history_.insert(history_.begin(), fetched_.begin(), fetched_.end());
      written_ = 0;
      fetched_.clear();
    }
  }
  return true;
}

// History lines (write_lines's) back into events, each to `to`, up to a declaration-free end; returns how many.
uint64_t ShardExecutor::parse_lines(std::istream& in, const std::function<void(const ExecEvent&)>& to) {
  std::string line, tok;
  uint64_t n = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    uint64_t txn;
    std::string ids;
    if (!(f >> txn >> ids)) break;
    if (ids == "=") continue;
    ExecEvent e{txn, 0, false, {}};
    while (f >> tok) {
      if (tok == "d") {
        e.deferred = true;
      } else if (tok.rfind("k=", 0) == 0) {
        unsigned long long dom, hi, lo;
        if (std::sscanf(tok.c_str() + 2, "%llu:%llu.%llu", &dom, &hi, &lo) != 3) return n;
        e.key = order_key(dom, hi, lo);
      }
    }
    // "3", "0-4", "0-2,7", or "2,0,1" (not ascending: listed one by one)
    std::istringstream r(ids);
    std::string part;
    while (std::getline(r, part, ',')) {
      const size_t dash = part.find('-');
      uint64_t a, b;
      try {
        a = std::stoull(part.substr(0, dash));
        b = dash == std::string::npos ? a : std::stoull(part.substr(dash + 1));
      } catch (const std::exception&) {
        return n;   // not a history line: the caller's count tells
      }
      if (b < a || b - a > 1'000'000) return n;
      for (uint64_t p = a; p <= b; ++p) {
        e.piece = static_cast<uint32_t>(p);
        to(e);
        ++n;
      }
    }
  }
  return n;
}

std::string outputs_digest(const Vars& outputs) {
  std::vector<const std::string*> names;
  names.reserve(outputs.size());
  for (const auto& [k, _] : outputs) names.push_back(&k);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  wl::Fnv f;
  for (const std::string* k : names) {
    const Value& v = outputs.at(*k);
    f.s(*k);
    f.i(static_cast<int64_t>(v.v_case()));
    switch (v.v_case()) {
      case Value::kI: f.i(v.i()); break;
      case Value::kD: {
        int64_t bits;
        double x = v.d();
        std::memcpy(&bits, &x, sizeof bits);
        f.i(bits);
        break;
      }
      case Value::kS: f.s(v.s()); break;
      default: break;
    }
  }
  return f.hex();
}

Vars execute_serially(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores,
                      const TxnRequest& t, std::vector<std::string>* errors) {
  Vars vars;
  std::set<uint32_t> done;
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& p : t.pieces()) {
      if (done.count(p.id())) continue;
      Vars scratch;
      const Vars* in = piece_vars(p, vars, &scratch);
      if (!in) continue;
      done.insert(p.id());
      progress = true;
      if (p.shard() >= stores.size()) {
        errors->push_back("piece " + std::to_string(p.id()) + ": shard " + std::to_string(p.shard()) +
                          " out of range");
        continue;
      }
      Vars out;
      try {
        w.execute(*stores[p.shard()], p, *in, &out);
      } catch (const BadMessage& e) {
        errors->push_back("piece " + std::to_string(p.id()) + ": " + e.what());
      }
      for (auto& [k, v] : out) vars[k] = v;
    }
  }
  if (done.size() != static_cast<size_t>(t.pieces_size()))
    errors->push_back("txn " + std::to_string(t.txn_id()) + ": inputs of " +
                      std::to_string(t.pieces_size() - done.size()) + " piece(s) never became known");
  return vars;
}

const Vars* piece_vars(const Piece& p, const Vars& known, Vars* scratch, bool partial) {
  if (p.inputs().empty()) return &p.args();
  *scratch = p.args();
  for (const auto& v : p.inputs()) {
    auto it = known.find(v);
    if (it != known.end()) (*scratch)[v] = it->second;
    else if (!partial) return nullptr;
  }
  return scratch;
}

}  // namespace txn
