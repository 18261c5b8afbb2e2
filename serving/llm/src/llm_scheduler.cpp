// Continuous batching of decoder sequences. See llm_scheduler.hpp.
#include "tessera/serving/llm_scheduler.hpp"

#include <algorithm>

#include "tessera/common/check.hpp"

namespace tessera::serving {

namespace {
const std::vector<int32_t> no_tokens;
}

llm_scheduler::llm_scheduler(scheduler_config cfg, int32_t num_blocks, int32_t block_tokens)
    : cfg_(cfg), blocks_(num_blocks, block_tokens, cfg.prefix_caching) {
  TESSERA_CHECK(cfg_.token_budget >= 1 && cfg_.max_running >= 1 && cfg_.static_batch_size >= 1)
      << "scheduler_config needs a token budget, max_running and static_batch_size >= 1";
}

status llm_scheduler::add(uint64_t id, std::vector<int32_t> prompt, int32_t max_new_tokens, bool score_prompt) {
  if (prompt.empty()) return status::invalid("empty prompt: at least one token is needed");
  if (max_new_tokens < (score_prompt ? 0 : 1))
    return status::invalid(score_prompt ? "max_new_tokens must be >= 0" : "max_new_tokens must be >= 1");
  if (score_prompt && max_new_tokens == 0 && prompt.size() < 2)
    return status::invalid("scoring a one-token prompt computes nothing");
  if (seqs_.count(id)) return status::invalid("sequence id " + std::to_string(id) + " is taken");
  const int64_t positions = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  const int64_t capacity = int64_t{blocks_.total_blocks()} * blocks_.block_tokens();
  if (positions > capacity)
    return status::invalid("prompt of " + std::to_string(prompt.size()) + " tokens plus " +
                           std::to_string(max_new_tokens) + " new tokens needs " +
                           std::to_string(positions) + " KV positions; the cache holds " +
                           std::to_string(capacity));
  sequence s;
  s.id = id;
  s.order = next_order_++;
  s.prompt_length = static_cast<int32_t>(prompt.size());
  s.tokens = std::move(prompt);
  s.max_new = max_new_tokens;
  if (score_prompt) s.score_until = max_new_tokens > 0 ? s.prompt_length : s.prompt_length - 1;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return ok_status();
}

status llm_scheduler::fork(uint64_t parent, uint64_t child, int32_t first_token, int32_t max_new_tokens) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return status::invalid("fork of unknown sequence " + std::to_string(parent));
  if (seqs_.count(child)) return status::invalid("sequence id " + std::to_string(child) + " is taken");
  if (max_new_tokens < 1) return status::invalid("max_new_tokens must be >= 1");
  const sequence& p = it->second;
  if (!p.running || !p.awaiting_token || static_cast<int32_t>(p.tokens.size()) != p.prompt_length)
    return status::invalid("fork of sequence " + std::to_string(parent) + " that is not at its first token");
  sequence s;
  s.id = child;
  s.order = next_order_++;
  s.prompt_length = p.prompt_length;
  s.tokens = p.tokens;
  s.tokens.push_back(first_token);
  s.max_new = max_new_tokens;
  const int32_t full = p.prompt_length / blocks_.block_tokens();
  if (static_cast<int32_t>(running_.size()) < cfg_.max_running) {
    blocks_.share(child, parent, full);
    s.computed = full * blocks_.block_tokens();
    stats_.prefix_hit_tokens += s.computed;
    s.running = true;
    running_.push_back(child);
    seqs_.emplace(child, std::move(s));
  } else {
    seqs_.emplace(child, std::move(s));
    insert_waiting(child);  // admitted later (its prompt blocks then from the prefix cache)
  }
  return ok_status();
}

void llm_scheduler::cancel(uint64_t id) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second.cancelled = true;
}

void llm_scheduler::insert_waiting(uint64_t id) {
  const uint64_t order = seqs_.at(id).order;
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](uint64_t w) { return seqs_.at(w).order > order; });
  waiting_.insert(pos, id);
}

void llm_scheduler::preempt(sequence& s) {
  blocks_.free(s.id);
  s.computed = 0;
  s.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  insert_waiting(s.id);
  ++stats_.preemptions;
}

void llm_scheduler::drop(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  blocks_.free(id);
  if (it->second.running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  seqs_.erase(it);
}

step_plan llm_scheduler::schedule() {
  step_plan plan;
  // Cancellations first: their blocks are free for this very step.
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    uint64_t id = it->first;
    bool cancelled = it->second.cancelled;
    ++it;
    if (cancelled) {
      plan.cancelled.push_back(id);
      drop(id);
    }
  }
  int32_t budget = cfg_.token_budget;
  auto add_step = [&](sequence& s, int32_t n) {
    backends::seq_step st;
    st.seq_id = s.id;
    st.start_pos = s.computed;
    st.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + n);
    st.block_table = blocks_.table(s.id);
    st.want_logits = s.computed + n == static_cast<int32_t>(s.tokens.size()) || s.computed < s.score_until;
    if (n == 1 && s.computed + 1 == static_cast<int32_t>(s.tokens.size()) &&
        s.computed >= s.prompt_length)
      plan.decode_tokens += 1;
    else
      plan.prefill_tokens += n;
    plan.batch.seqs.push_back(std::move(st));
    budget -= n;
  };

  // 1. Running sequences, oldest first. Victims of preemption are taken from the newest end,
  // never among those already in this step.
  size_t scheduled = 0;  // running_[0, scheduled) are in the plan
  while (scheduled < running_.size() && budget > 0) {
    sequence& s = seqs_.at(running_[scheduled]);
    if (s.finishing) {  // its last token is on its way: it ends when it comes
      ++scheduled;
      continue;
    }
    TESSERA_CHECK(!s.awaiting_token) << "schedule() before append() of sequence " << s.id;
    const int32_t need = s.computed < s.score_until ? 1 : static_cast<int32_t>(s.tokens.size()) - s.computed;
    const int32_t n = std::min(need, budget);
    bool self_preempted = false;
    while (!blocks_.ensure(s.id, s.computed + n)) {
      if (running_.size() - 1 > scheduled) {
        preempt(seqs_.at(running_.back()));
      } else {
        preempt(s);  // nothing newer to take from: this one waits
        self_preempted = true;
        break;
      }
      ++plan.preempted;
    }
    if (self_preempted) {
      ++plan.preempted;
      break;
    }
    add_step(s, n);
    ++scheduled;
  }

  // 2. Admissions (none while preempting: the pool is short).
  const bool may_admit = plan.preempted == 0 &&
                         (cfg_.mode == batching_mode::continuous || running_.empty());
  const size_t limit = cfg_.mode == batching_mode::continuous
                           ? static_cast<size_t>(cfg_.max_running)
                           : static_cast<size_t>(std::min(cfg_.max_running, cfg_.static_batch_size));
  while (may_admit && !waiting_.empty() && running_.size() < limit) {
    sequence& s = seqs_.at(waiting_.front());
    const auto peek = s.score_until > 0 ? kv_block_manager::prefix_peek{} : blocks_.peek_prefix(s.tokens);
    const int32_t need_blocks =
        blocks_.blocks_for(static_cast<int64_t>(s.tokens.size())) - peek.blocks;
    if (blocks_.free_blocks() - peek.evictable < need_blocks) break;  // first come, first served
    // Static mode admits the whole batch now, even what the budget cannot start this step.
    if (budget <= 0 && cfg_.mode == batching_mode::continuous) break;
    waiting_.pop_front();
    s.running = true;
    running_.push_back(s.id);
    s.computed = s.score_until > 0 ? 0 : blocks_.match_prefix(s.id, s.tokens);
    stats_.prefix_hit_tokens += s.computed;
    if (budget <= 0) continue;
    const int32_t n = s.computed < s.score_until ? 1 : std::min(static_cast<int32_t>(s.tokens.size()) - s.computed, budget);
    bool ok = blocks_.ensure(s.id, s.computed + n);
    TESSERA_CHECK(ok) << "admitted sequence " << s.id << " found no blocks";
    add_step(s, n);
  }
  if (!plan.empty()) {
    ++stats_.steps;
    stats_.prefill_tokens += plan.prefill_tokens;
    stats_.decode_tokens += plan.decode_tokens;
  }
  return plan;
}

void llm_scheduler::step_done(const step_plan& plan) {
  for (const auto& st : plan.batch.seqs) {
    auto it = seqs_.find(st.seq_id);
    if (it == seqs_.end()) continue;  // finished or dropped meanwhile
    sequence& s = it->second;
    TESSERA_CHECK(s.computed == st.start_pos) << "step_done out of order for sequence " << s.id;
    s.computed += static_cast<int32_t>(st.tokens.size());
    s.awaiting_token = st.want_logits && s.computed == static_cast<int32_t>(s.tokens.size());
    if (s.computed >= s.score_until) s.score_until = 0;  // scored: a recompute goes at full speed
    blocks_.commit_full_blocks(s.id, s.tokens, s.computed);
  }
}

void llm_scheduler::append(uint64_t id, int32_t token) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  sequence& s = it->second;
  if (s.pending_at >= 0) {  // speculate()d: the token takes its placeholder's place
    s.tokens[static_cast<size_t>(s.pending_at)] = token;
    s.pending_at = -1;
    return;
  }
  TESSERA_CHECK(s.awaiting_token) << "append() to sequence " << id << " that got no logits";
  TESSERA_CHECK(static_cast<int32_t>(s.tokens.size()) - s.prompt_length < s.max_new)
      << "sequence " << id << " appended past max_new_tokens";
  s.awaiting_token = false;
  s.tokens.push_back(token);
}

void llm_scheduler::finish(uint64_t id) { drop(id); }

bool llm_scheduler::speculate(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  sequence& s = it->second;
  TESSERA_CHECK(s.awaiting_token && s.pending_at < 0) << "speculate() on sequence " << id << " that awaits no token";
  if (static_cast<int32_t>(s.tokens.size()) - s.prompt_length + 1 >= s.max_new) {
    s.finishing = true;  // this token is its last
    return false;
  }
  s.awaiting_token = false;
  s.pending_at = static_cast<int32_t>(s.tokens.size());
  s.tokens.push_back(kPendingToken);
  return true;
}

bool llm_scheduler::pending(uint64_t id) const {
  auto it = seqs_.find(id);
  return it != seqs_.end() && it->second.pending_at >= 0;
}

void llm_scheduler::unspeculate() {
  for (auto& [id, s] : seqs_) {
    if (s.pending_at >= 0) s.tokens.resize(static_cast<size_t>(s.pending_at));
    s.pending_at = -1;
    s.finishing = false;
    s.awaiting_token = false;
  }
}

void llm_scheduler::lose_kv() {
  const std::vector<uint64_t> running = running_;
  for (uint64_t id : running) {
    sequence& s = seqs_.at(id);
    s.awaiting_token = false;
    preempt(s);
  }
  blocks_.forget_cached();
}

const std::vector<int32_t>& llm_scheduler::tokens(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? no_tokens : it->second.tokens;
}

int32_t llm_scheduler::prompt_length(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second.prompt_length;
}

std::string llm_scheduler::check() const {
  if (auto b = blocks_.check(); !b.empty()) return b;
  if (waiting_.size() + running_.size() != seqs_.size()) return "queues and sequences disagree";
  for (size_t i = 0; i + 1 < waiting_.size(); ++i)
    if (seqs_.at(waiting_[i]).order > seqs_.at(waiting_[i + 1]).order) return "waiting queue out of order";
  for (const auto& [id, s] : seqs_) {
    const auto& table = blocks_.table(id);
    if (!s.running && (!table.empty() || s.computed != 0))
      return "waiting sequence " + std::to_string(id) + " holds blocks";
    if (s.computed > static_cast<int32_t>(s.tokens.size())) return "computed beyond tokens";
    if (blocks_.blocks_for(s.computed) > static_cast<int32_t>(table.size()))
      return "sequence " + std::to_string(id) + " computed beyond its blocks";
  }
  if (static_cast<int64_t>(running_.size()) > cfg_.max_running) return "too many running";
  return {};
}

}  // namespace tessera::serving
