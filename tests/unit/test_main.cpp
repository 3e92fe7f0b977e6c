#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../skip.hpp"

namespace {

// With ACCEL_BATCH_RESULTS set (tests/batch.sh run): each test case appends "<name> started"
// to $ACCEL_BATCH_RESULTS.rank0 as it starts and "<name> passed", "failed" or "skipped" as it
// ends, from which each case's own ctest test is judged (accel_doctest_tests in
// tests/CMakeLists.txt): the binary runs once for all its cases. A case with no "passed" or
// "skipped" line, a line not written included, fails its test.
struct BatchResults : doctest::IReporter {
  explicit BatchResults(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& test_case) override {
    name_ = test_case.m_name;
    record("started");
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    // SkipCounter (registered below) clears the mark only when the next case starts.
    record(!stats.testCaseSuccess                       ? "failed"
           : accel_test::skip_record().current_skipped ? "skipped"
                                                       : "passed");
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  void record(const char* what) const {
    const char* prefix = std::getenv("ACCEL_BATCH_RESULTS");
    if (prefix == nullptr) return;
    const std::string path = std::string(prefix) + ".rank0";
    std::FILE* file = std::fopen(path.c_str(), "a");
    if (file == nullptr) return;
    std::fprintf(file, "%s %s\n", name_.c_str(), what);
    std::fclose(file);
  }

  std::string name_;
};

}  // namespace

REGISTER_LISTENER("accel_skips", 1, accel_test::SkipCounter);
REGISTER_LISTENER("accel_batch_results", 1, BatchResults);

// doctest's main, but a run whose every case skipped exits 77 (ctest's skip; tests/skip.hpp).
int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;
  return accel_test::exit_status(status);
}
