#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// With ACCEL_BATCH_RESULTS set (tests/batch.sh run): each test case that passes appends a line
// "<name> passed" to $ACCEL_BATCH_RESULTS.rank0, from which each case's own ctest test is
// judged (accel_doctest_tests in tests/CMakeLists.txt): the binary runs once for all its cases.
struct BatchResults : doctest::IReporter {
  explicit BatchResults(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& test_case) override {
    name_ = test_case.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    const char* prefix = std::getenv("ACCEL_BATCH_RESULTS");
    if (prefix == nullptr || !stats.testCaseSuccess) return;
    const std::string path = std::string(prefix) + ".rank0";
    std::FILE* file = std::fopen(path.c_str(), "a");
    // A result not written is a case run again alone, never a failure hidden.
    if (file == nullptr) return;
    std::fprintf(file, "%s passed\n", name_.c_str());
    std::fclose(file);
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  std::string name_;
};

}  // namespace

REGISTER_LISTENER("accel_batch_results", 1, BatchResults);
