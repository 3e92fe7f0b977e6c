// StuckCollectiveWatch; stuck_collective.hpp includes it in header-only mode.
#pragma once

#include "../stuck_collective.hpp"

namespace accel::runtime {

namespace stuck_detail {
// The process's live watches, for compare_now().
struct Registry {
  std::mutex mutex;
  std::vector<StuckCollectiveWatch*> watches;
};
inline Registry& registry() {
  static Registry instance;
  return instance;
}
}  // namespace stuck_detail

ACCEL_DECL StuckCollectiveWatch::StuckCollectiveWatch(c10::intrusive_ptr<c10d::Store> store,
                                                      int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size), thread_([this] { watch(); }) {
  auto& registry = stuck_detail::registry();
  const std::scoped_lock lock(registry.mutex);
  registry.watches.push_back(this);
}

ACCEL_DECL StuckCollectiveWatch::~StuckCollectiveWatch() {
  {
    auto& registry = stuck_detail::registry();
    const std::scoped_lock lock(registry.mutex);
    std::erase(registry.watches, this);
  }
  {
    const std::scoped_lock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

ACCEL_DECL StuckCollectiveWatch::Waiting::Waiting(StuckCollectiveWatch* watch,
                                                  std::uint64_t sequence,
                                                  std::function<std::string()> describe)
    : watch_(watch) {
  if (watch_ == nullptr) return;
  const std::scoped_lock lock(watch_->mutex_);
  watch_->waiting_ = Wait{sequence, std::move(describe), std::chrono::steady_clock::now()};
}

ACCEL_DECL StuckCollectiveWatch::Waiting::~Waiting() {
  if (watch_ == nullptr) return;
  const std::scoped_lock lock(watch_->mutex_);
  watch_->waiting_.reset();
}

ACCEL_DECL std::optional<StuckCollectiveWatch::Published> StuckCollectiveWatch::current(
    std::chrono::milliseconds at_least) {
  const std::scoped_lock lock(mutex_);
  if (!waiting_ || std::chrono::steady_clock::now() - waiting_->since < at_least)
    return std::nullopt;
  return Published{waiting_->sequence, waiting_->describe()};  // under the lock: alive
}

ACCEL_DECL void StuckCollectiveWatch::compare_now(std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  auto& registry = stuck_detail::registry();
  // Held to the end: the process is ending, and no watch may go away meanwhile.
  const std::scoped_lock lock(registry.mutex);
  std::vector<std::vector<std::string>> before;  // the peers' entries as this began
  for (StuckCollectiveWatch* watch : registry.watches) before.push_back(watch->entries());
  for (bool last = false; !last;) {
    last = std::chrono::steady_clock::now() >= deadline;
    for (std::size_t w = 0; w < registry.watches.size(); ++w) {
      StuckCollectiveWatch* watch = registry.watches[w];
      const std::optional<Published> mine = watch->current(std::chrono::milliseconds(0));
      if (!mine) continue;
      try {
        watch->store_->set(watch->key(watch->rank_),
                           store_bytes(fmt::format("{}\n{}", mine->sequence, mine->what)));
        watch->compare(*mine, &before[w], last);
      } catch (const std::exception&) {
        // The store is gone: nothing more to learn from it.
      }
    }
    if (!last) std::this_thread::sleep_for(compare_every);
  }
}

ACCEL_DECL std::vector<std::string> StuckCollectiveWatch::entries() {
  std::vector<std::string> texts(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    try {
      if (r != rank_ && store_->check({key(r)}))
        texts[static_cast<std::size_t>(r)] = store_text(store_->get(key(r)));
    } catch (const std::exception&) {
    }
  }
  return texts;
}

ACCEL_DECL void StuckCollectiveWatch::watch() {
  std::optional<std::uint64_t> published;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, compare_every, [this] { return stopping_; })) {
    lock.unlock();
    if (const std::optional<Published> mine = current(publish_after)) {
      try {
        if (published != mine->sequence) {
          store_->set(key(rank_), store_bytes(fmt::format("{}\n{}", mine->sequence, mine->what)));
          published = mine->sequence;
        }
        compare(*mine);
      } catch (const std::exception&) {
        // The store is gone (rank 0, which serves it, has exited): the collective's own error
        // says so.
      }
    }
    lock.lock();
  }
}

ACCEL_DECL void StuckCollectiveWatch::compare(const Published& mine,
                                              const std::vector<std::string>* before,
                                              bool settle) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !store_->check({key(r)})) continue;
    const std::string text = store_text(store_->get(key(r)));
    const auto newline = text.find('\n');
    if (newline == std::string::npos) continue;
    const std::uint64_t sequence = std::stoull(text.substr(0, newline));
    const std::string theirs = text.substr(newline + 1);
    std::string line;
    if (sequence == mine.sequence && theirs != mine.what) {
      const int low = std::min(r, rank_), high = std::max(r, rank_);
      line = fmt::format("accel: the ranks are in different collectives at #{}: rank {} waits in "
                         "{}, rank {} waits in {}",
                         mine.sequence, low, low == rank_ ? mine.what : theirs, high,
                         low == rank_ ? theirs : mine.what);
    } else if (before != nullptr && sequence > mine.sequence &&
               (settle || (*before)[static_cast<std::size_t>(r)] != text)) {
      // Gloo paired the peer's call at this number with this one, and it went on: its entry,
      // new since compare_now began (or the last seen), says where it waits now.
      line = fmt::format("accel: the ranks are in different collectives: rank {} waits in {}, "
                         "rank {} has gone past #{} (Gloo paired its call there with this one) "
                         "and waits in {}",
                         rank_, mine.what, r, mine.sequence, theirs);
    } else {
      continue;
    }
    std::fprintf(stderr,
                 "%s; every rank must make the same collective calls in the same order: "
                 "save_state, save_model, load_state, load_model, gather_for_metrics and "
                 "wait_for_everyone are collective, so call them on every rank, not inside "
                 "`if (is_main_process())` (this is rank %d)\n",
                 line.c_str(), rank_);
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace accel::runtime
