// Admission, the ranks' meeting in the store; admission.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../admission.hpp"

namespace accel::runtime {

ACCEL_DECL Admission::Admission(c10d::Store& store, RunIdentity identity, int rank,
                                MeetingPoint meeting, RendezvousClock::time_point deadline,
                                std::chrono::milliseconds rendezvous)
    : store_(store), mine_(std::move(identity)), rank_(rank), meeting_(std::move(meeting)),
      deadline_(deadline), rendezvous_(rendezvous) {}

ACCEL_DECL void Admission::run() {
  try {
    if (rank_ == 0)
      admit_the_others();
    else
      join();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    // The store failed under us: rank 0, which serves it, has gone.
    accel::detail::fail("rank {} of {}: {} failed while the ranks met ({}); rank 0, which serves "
                        "it, may have exited",
                        rank_, mine_.describe(), meeting_.where, error_line(error));
  }
}

ACCEL_DECL std::string Admission::who() const {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("rank {} of {} (pid {} on {})", rank_, mine_.describe(), ::getpid(), host);
}

ACCEL_DECL bool Admission::wait_for(const std::string& name) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store_.check({key(name)})) return true;
    const auto left = time_left(deadline_);
    if (left.count() == 0) return false;
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

ACCEL_DECL std::string Admission::missing() {
  std::vector<int> ranks;
  for (int r = 1; r < mine_.world_size; ++r)
    if (!store_.check({key("claim/" + std::to_string(r))})) ranks.push_back(r);
  if (ranks.empty()) return {};
  const auto shown = static_cast<std::ptrdiff_t>(std::min<std::size_t>(ranks.size(), 16));
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  text += fmt::format("{}", fmt::join(ranks.begin(), ranks.begin() + shown, ", "));
  if (static_cast<std::size_t>(shown) < ranks.size())
    text += fmt::format(" and {} more", ranks.size() - static_cast<std::size_t>(shown));
  return text;
}

ACCEL_DECL void Admission::refuse(const std::string& kind) {
  const auto number = store_.add(key("refused"), 1);
  store_.set(key("refused/" + std::to_string(number)), store_bytes(kind + "\n" + who()));
}

ACCEL_DECL void Admission::join() {
  if (!wait_for("identity"))
    accel::detail::fail("rank {} of {}: whatever serves {} did not say which run it serves within "
                        "the rendezvous timeout of {} s (Options::rendezvous_timeout, "
                        "ACCEL_RENDEZVOUS_TIMEOUT), so it is not rank 0 of an accel run (another "
                        "program?); {}",
                        rank_, mine_.describe(), meeting_.where, seconds(), meeting_.fix);
  const RunIdentity theirs = RunIdentity::decode(get_text("identity"));
  if (!theirs.same_job(mine_)) {
    refuse("a rank of another job");
    accel::detail::fail("rank {} of {} reached {}, where rank 0 of another job serves: {}; "
                        "refused: {}, and start the ranks of one job with the same WORLD_SIZE and "
                        "run identity (ACCEL_RUN_ID, or the launcher's)",
                        rank_, mine_.describe(), meeting_.where, theirs.describe(), meeting_.fix);
  }
  if (store_.add(key("claim/" + std::to_string(rank_)), 1) != 1) {
    refuse("a second rank " + std::to_string(rank_));
    accel::detail::fail("rank {} of {}: another process has already joined {} as rank {} of this "
                        "run; refused. Two jobs that no run identity tells apart share it, or two "
                        "processes were given RANK={}: {}, or set ACCEL_RUN_ID to a value of its "
                        "own in each job",
                        rank_, mine_.describe(), meeting_.where, rank_, rank_, meeting_.fix);
  }
  store_.add(key("joined"), 1);
  if (!wait_for("complete"))
    accel::detail::fail("rank {} of {}: not every rank joined {} within the rendezvous timeout of "
                        "{} s (Options::rendezvous_timeout, ACCEL_RENDEZVOUS_TIMEOUT); missing: "
                        "{}. Start every rank with the same MASTER_ADDR, MASTER_PORT and "
                        "WORLD_SIZE, or raise the timeout",
                        rank_, mine_.describe(), meeting_.where, seconds(),
                        or_else(missing(),
                                "no rank, but rank 0 did not see them all (has it exited?)"));
}

ACCEL_DECL void Admission::admit_the_others() {
  store_.set(key("identity"), store_bytes(mine_.encode()));
  std::int64_t reported = 0;
  const auto report_refusals = [&] {
    const std::int64_t refused = store_.add(key("refused"), 0);
    // A refusal is counted before it is described: read each once its text is there.
    while (reported < refused && store_.check({key("refused/" + std::to_string(reported + 1))})) {
      ++reported;
      report(get_text("refused/" + std::to_string(reported)));
    }
  };
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    report_refusals();
    if (store_.add(key("joined"), 0) >= mine_.world_size - 1) break;
    const auto left = time_left(deadline_);
    if (left.count() == 0)
      accel::detail::fail("rank 0 of {}: {} did not join {} within the rendezvous timeout of {} s "
                          "(Options::rendezvous_timeout, ACCEL_RENDEZVOUS_TIMEOUT); start every "
                          "rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise "
                          "the timeout",
                          mine_.describe(), or_else(missing(), "a rank that claimed its place"),
                          meeting_.where, seconds());
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  store_.set(key("complete"), store_bytes("1"));
  report_refusals();  // one that came meanwhile
}

ACCEL_DECL void Admission::report(const std::string& record) const {
  const auto newline = record.find('\n');
  const std::string kind = record.substr(0, newline);
  const std::string process = newline == std::string::npos ? "" : record.substr(newline + 1);
  std::fprintf(stderr, "%s\n",
               fmt::format("accel: rank 0 of {} refused {} at {}: {}; this run goes on; {}",
                           mine_.describe(), kind, meeting_.where, process, meeting_.fix)
                   .c_str());
}

}  // namespace accel::runtime
