// StuckCollectiveWatch; stuck_collective.hpp includes it in header-only mode.
#pragma once

#include "../stuck_collective.hpp"

namespace accel::runtime {

ACCEL_DECL StuckCollectiveWatch::StuckCollectiveWatch(c10::intrusive_ptr<c10d::Store> store,
                                                      int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size), thread_([this] { watch(); }) {}

ACCEL_DECL StuckCollectiveWatch::~StuckCollectiveWatch() {
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

ACCEL_DECL void StuckCollectiveWatch::watch() {
  std::optional<std::uint64_t> published;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, compare_every, [this] { return stopping_; })) {
    if (!waiting_ || std::chrono::steady_clock::now() - waiting_->since < publish_after) continue;
    const Published mine{waiting_->sequence, waiting_->describe()};  // under the lock: alive
    lock.unlock();
    try {
      if (published != mine.sequence) {
        store_->set(key(rank_), store_bytes(fmt::format("{}\n{}", mine.sequence, mine.what)));
        published = mine.sequence;
      }
      compare(mine);
    } catch (const std::exception&) {
      // The store is gone (rank 0, which serves it, has exited): the collective's own error
      // says so.
    }
    lock.lock();
  }
}

ACCEL_DECL void StuckCollectiveWatch::compare(const Published& mine) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !store_->check({key(r)})) continue;
    const std::string text = store_text(store_->get(key(r)));
    const auto newline = text.find('\n');
    if (newline == std::string::npos) continue;
    if (std::stoull(text.substr(0, newline)) != mine.sequence) continue;
    const std::string theirs = text.substr(newline + 1);
    if (theirs == mine.what) continue;
    const int low = std::min(r, rank_), high = std::max(r, rank_);
    const std::string& low_what = low == rank_ ? mine.what : theirs;
    const std::string& high_what = low == rank_ ? theirs : mine.what;
    std::fprintf(stderr,
                 "accel: the ranks are in different collectives at #%llu: rank %d waits in %s, "
                 "rank %d waits in %s; every rank must make the same collective calls in the "
                 "same order: save_state, save_model, load_state, load_model, "
                 "gather_for_metrics and wait_for_everyone are collective, so call them on "
                 "every rank, not inside `if (is_main_process())` (this is rank %d)\n",
                 static_cast<unsigned long long>(mine.sequence), low, low_what.c_str(), high,
                 high_what.c_str(), rank_);
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace accel::runtime
