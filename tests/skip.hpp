// Skipped doctest cases (docs/dev/testing.md). A case with nothing to check where it runs (no
// CUDA device, a tool built without an optional library) calls accel_test::skip(reason) and
// returns: its ctest test then ends with status 77, which every doctest test declares as its
// SKIP_RETURN_CODE, and ctest lists it as skipped, never as passed. A case that cannot exist in
// a build (a libtorch feature its version lacks) is not registered there instead:
// TEST_CASE("..." * doctest::skip(!feature)) keeps it out of --list-test-cases, so no ctest test.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace accel_test {

// The exit status ctest reads as "skipped".
inline constexpr int skip_status = 77;

// What this process's cases did: how many ran, and how many of them skipped.
struct SkipRecord {
  bool current_skipped = false;
  int cases = 0;
  int skipped = 0;
};

inline SkipRecord& skip_record() {
  static SkipRecord record;
  return record;
}

// Marks the running case skipped; the case returns right after, having checked nothing.
inline void skip(const char* reason) {
  const std::string message = std::string("skipped: ") + reason;
  MESSAGE(message);
  skip_record().current_skipped = true;
}

// Counts the cases and their skips; each test binary's main registers it (REGISTER_LISTENER)
// and returns exit_status().
struct SkipCounter : doctest::IReporter {
  explicit SkipCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {
    skip_record().current_skipped = false;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    ++skip_record().cases;
    if (skip_record().current_skipped && stats.testCaseSuccess) ++skip_record().skipped;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

// main's exit status: 77 when cases ran and every one of them skipped (one case run alone, as
// ctest runs it), doctest's own otherwise.
inline int exit_status(int doctest_status) {
  const SkipRecord& record = skip_record();
  return doctest_status == 0 && record.cases > 0 && record.skipped == record.cases ? skip_status
                                                                                 : doctest_status;
}

}  // namespace accel_test
