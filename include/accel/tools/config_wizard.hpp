// `accel-launch config` as questions, Accelerate's `accelerate config`: asked when stdin is a
// terminal and no setting is given as a flag, or with --interactive. Each answer is checked as
// it is typed (a wrong one is asked again, naming what is allowed; Enter takes the default shown
// in brackets, read from this machine), the YAML is shown before it is written, an existing file
// is replaced only when the user answers y, and the end of input (Ctrl-D) at any question stops
// with an `accel:` error and writes nothing.
//
// What the launcher reads (nproc, nnodes, node-rank, master-addr, master-port,
// threads-per-process) goes into the file as config_file.hpp reads it back; the compile-time
// choices (parallelism, precision, accumulation) go into its `env` as ACCEL_VARIANT, which
// accel::Variants reads (variants.hpp), and are printed as the Accelerator alias and the
// accel_add_variants() line that build them.
#pragma once

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../launch/command_line.hpp"
#include "../launch/error.hpp"
#include "../launch/options.hpp"
#include "../launch/threads.hpp"
#include "config_file.hpp"

namespace accel::launcher {

// The GPUs a worker on this machine would see. accel-launch links no torch, so it cannot ask
// CUDA: CUDA_VISIBLE_DEVICES's entries when it is set (CUDA stops at the first invalid one,
// so "" and "-1" hide every GPU), else NVIDIA's device files /dev/nvidia0, /dev/nvidia1, ...
// It is a default to confirm, not a check of the driver.
inline int visible_gpus() {
  if (const char* set = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string_view list = set;
    int count = 0;
    while (!list.empty()) {
      const auto comma = list.find(',');
      const std::string_view entry = list.substr(0, comma);
      if (entry.empty() || entry.starts_with("-")) break;
      ++count;
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return count;
  }
  // The error_code forms throughout: a /dev that cannot be listed means no GPU seen, not an
  // exception past the launcher's `accel:` errors.
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator entry("/dev", error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") &&
        std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      ++count;
  }
  return count;
}

// What `accel-launch config` was asked for when it asks questions: -o FILE and --force.
struct WizardRequest {
  std::string output;  // empty: asked for
  bool force = false;
};

// Whether `accel-launch config ...` (argv[1] is "config") asks its questions: with --interactive,
// or with stdin a terminal and no flag but -o FILE and --force. nullopt: the flags-only path
// (write_launch_config), exactly as without a terminal.
inline std::optional<WizardRequest> wizard_request(int argc, const char* const* argv) {
  WizardRequest request;
  bool interactive = false;
  std::string other;  // the first argument that is a setting (or --help)
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--interactive") {
      interactive = true;
    } else if (arg == "--force") {
      request.force = true;
    } else if ((arg == "-o" || arg == "--output") && i + 1 < argc) {
      request.output = argv[++i];
    } else if (other.empty()) {
      other = arg;
    }
  }
  if (other == "-h" || other == "--help") return std::nullopt;
  if (!interactive && (!other.empty() || ::isatty(STDIN_FILENO) == 0)) return std::nullopt;
  if (!other.empty())
    fail("accel-launch config --interactive asks for every setting, so it takes only -o FILE "
         "and --force, not '" + other + "'; give the settings as flags without --interactive, "
         "e.g. accel-launch config --nproc 4 -o launch.yaml");
  return request;
}

// The answers, in the terms the launcher and accel_add_variants() use.
struct WizardChoice {
  LaunchOptions launch;
  int threads = 1;
  std::string parallelism = "Ddp";  // Ddp, Zero2, Zero3, Fsdp<FullShard>, ...
  std::string precision = "Fp32";   // Fp32, Bf16, Fp16, Fp8
  int accumulation = 1;
};

// "Zero3,Bf16,4": the variant as accel_add_variants() and ACCEL_VARIANT name it.
inline std::string variant_text(const WizardChoice& choice) {
  return choice.parallelism + "," + choice.precision + "," + std::to_string(choice.accumulation);
}

// "accel::Accelerator<accel::Zero3, accel::Bf16, accel::GradAccum<4>>", as
// cmake/accel-variants.cmake writes the alias (every name gets accel::, Fsdp's sharding too).
inline std::string alias_text(const WizardChoice& choice) {
  std::string parallelism;
  for (std::size_t i = 0; i < choice.parallelism.size(); ++i) {
    const bool starts_name = std::isalpha(static_cast<unsigned char>(choice.parallelism[i])) &&
                             (i == 0 || choice.parallelism[i - 1] == '<');
    if (starts_name) parallelism += "accel::";
    parallelism += choice.parallelism[i];
  }
  return "accel::Accelerator<" + parallelism + ", accel::" + choice.precision +
         ", accel::GradAccum<" + std::to_string(choice.accumulation) + ">>";
}

// "train_fsdp_fullshard_bf16_4": the executable accel_add_variants(train ...) makes for the
// variant (cmake/accel-variants.cmake: lowercase, every run of other characters one '_').
inline std::string variant_target(const WizardChoice& choice) {
  std::string target;
  for (const char c : "train_" + choice.parallelism + "_" + choice.precision + "_" +
                          std::to_string(choice.accumulation)) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool kept = (lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9');
    if (kept) target += lower;
    else if (!target.ends_with('_')) target += '_';
  }
  return target;
}

// The file's text: the keys config_file.hpp reads, the variant in `env`.
inline std::string wizard_yaml(const WizardChoice& choice) {
  YAML::Emitter yaml;
  yaml << YAML::BeginMap;
  yaml << YAML::Key << "nproc" << YAML::Value << choice.launch.nproc;
  if (choice.launch.nnodes > 1) {
    yaml << YAML::Key << "nnodes" << YAML::Value << choice.launch.nnodes;
    yaml << YAML::Key << "node-rank" << YAML::Value << choice.launch.node_rank;
    yaml << YAML::Key << "master-addr" << YAML::Value << choice.launch.master_addr;
    yaml << YAML::Key << "master-port" << YAML::Value << choice.launch.master_port.value_or(0);
  }
  yaml << YAML::Key << "threads-per-process" << YAML::Value << choice.threads;
  yaml << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
  yaml << YAML::Key << "ACCEL_VARIANT" << YAML::Value << variant_text(choice);
  yaml << YAML::EndMap << YAML::EndMap;
  return std::string(yaml.c_str()) + "\n";
}

// One question at a time on `in` and `out`.
class Questions {
 public:
  Questions(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  // The answer to `question` (trimmed; Enter: `fallback`) that `problem` finds nothing wrong
  // with: `problem` returns why an answer is refused, and the question is asked again.
  std::string ask(const std::string& question, const std::string& fallback,
                  const std::function<std::string(const std::string&)>& problem) {
    for (;;) {
      out_ << question << (fallback.empty() ? "" : " [" + fallback + "]") << ": " << std::flush;
      std::string line;
      if (!std::getline(in_, line)) {
        out_ << "\n" << std::flush;
        fail("accel-launch config: the input ended at '" + question + "', so nothing was written; "
             "answer every question (Enter takes the default in brackets), or give the settings "
             "as flags, e.g. accel-launch config --nproc 2 -o launch.yaml");
      }
      const auto first = line.find_first_not_of(" \t\r");
      const auto last = line.find_last_not_of(" \t\r");
      std::string answer = first == std::string::npos ? "" : line.substr(first, last - first + 1);
      if (answer.empty()) answer = fallback;
      const std::string why = problem(answer);
      if (why.empty()) return answer;
      out_ << "  " << why << "\n";
    }
  }

  // One of `choices` (case does not matter).
  std::string choose(const std::string& question, const std::vector<std::string>& choices,
                     const std::string& fallback) {
    std::string list;
    for (const auto& choice : choices) list += (list.empty() ? "" : ", ") + choice;
    const auto problem = [&](const std::string& a) {
      for (const auto& choice : choices)
        if (lowercase(a) == choice) return std::string();
      return "'" + a + "' is not allowed; answer one of " + list;
    };
    const std::string answer = ask(question + " (" + list + ")", fallback, problem);
    return lowercase(answer);
  }

  // A whole number from `low` to `high`.
  int number(const std::string& question, int fallback, int low, int high) {
    const std::string range = "a whole number from " + std::to_string(low) + " to " +
                              std::to_string(high);
    return std::stoi(ask(question, std::to_string(fallback), [&](const std::string& a) {
      int value = 0;
      const auto [end, error] = std::from_chars(a.data(), a.data() + a.size(), value);
      if (a.empty() || error != std::errc{} || end != a.data() + a.size() || value < low ||
          value > high)
        return "'" + a + "' is not allowed; answer " + range;
      return std::string();
    }));
  }

  // y or n.
  bool yes(const std::string& question, bool fallback) {
    const auto problem = [](const std::string& a) {
      const std::string lower = lowercase(a);
      if (lower == "y" || lower == "yes" || lower == "n" || lower == "no") return std::string();
      return "'" + a + "' is not allowed; answer y or n";
    };
    const std::string answer = ask(question + " (y, n)", fallback ? "y" : "n", problem);
    return lowercase(answer).starts_with("y");
  }

 private:
  static std::string lowercase(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }

  std::istream& in_;
  std::ostream& out_;
};

// The questions of `accelerate config`, with this machine's cores and GPUs as the defaults.
inline WizardChoice ask_wizard_questions(Questions& questions, std::ostream& out) {
  WizardChoice choice;
  const int cores = usable_cores();
  const int gpus = visible_gpus();
  out << "accel-launch config: this machine has " << cores << " usable core(s) and shows " << gpus
      << " GPU(s). Enter takes the default in brackets; Ctrl-D stops without writing.\n";
  const bool several =
      questions.choose("Compute environment", {"this-machine", "several-machines"},
                       "this-machine") == "several-machines";
  const std::string machine = questions.choose(
      "Machine type: one CPU process, several CPU processes or GPUs", {"cpu", "multi-cpu", "gpu"},
      gpus > 0 ? "gpu" : cores > 1 ? "multi-cpu" : "cpu");
  if (several) {
    choice.launch.nnodes = questions.number("Number of machines", 2, 2, 1000);
    choice.launch.node_rank = questions.number("This machine's rank (0 on the main machine)", 0, 0,
                                               choice.launch.nnodes - 1);
    char host[256] = {};
    if (choice.launch.node_rank != 0 || ::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    choice.launch.master_addr =
        questions.ask("Main machine's address (reachable from every machine)", host,
                      [](const std::string& a) {
                        if (a.empty() || a.find_first_of(" \t") != std::string::npos)
                          return std::string("give a host name or an address such as 10.0.0.1");
                        return std::string();
                      });
    choice.launch.master_port =
        questions.number("Main machine's port", default_multi_node_port, 1, 65535);
  }
  const int most = 1'000'000 / choice.launch.nnodes;  // the launcher's limit of ranks
  if (machine == "cpu") {
    choice.launch.nproc = 1;
  } else if (machine == "gpu") {
    // One process per GPU: each takes the GPU of its local rank (runtime/bootstrap.hpp).
    choice.launch.nproc =
        questions.number("Processes on this machine, one per GPU", std::max(1, gpus), 1,
                         gpus > 0 ? gpus : most);
  } else {
    choice.launch.nproc =
        questions.number("CPU processes on this machine", std::max(2, std::min(cores, 4)), 1, most);
  }
  const std::string precision =
      questions.choose("Mixed precision", {"no", "fp16", "bf16", "fp8"}, "no");
  choice.precision = precision == "no" ? "Fp32" : precision == "fp16" ? "Fp16"
                     : precision == "bf16" ? "Bf16" : "Fp8";
  choice.threads = questions.number(
      "CPU threads per process (OMP_NUM_THREADS)",
      std::min(max_threads_per_process, threads_per_process(cores, choice.launch.nproc)), 1,
      max_threads_per_process);
  choice.accumulation = questions.number("Gradient accumulation steps", 1, 1, 1'000'000);
  const std::string parallelism =
      questions.choose("Parallelism", {"ddp", "zero2", "zero3", "fsdp"}, "ddp");
  choice.parallelism = parallelism == "ddp" ? "Ddp" : parallelism == "zero2" ? "Zero2" : "Zero3";
  if (parallelism == "fsdp") {
    const std::string sharding = questions.choose(
        "FSDP sharding", {"full-shard", "shard-grad-op", "no-shard", "hybrid-shard"},
        "full-shard");
    choice.parallelism = sharding == "full-shard"      ? "Fsdp<FullShard>"
                         : sharding == "shard-grad-op" ? "Fsdp<ShardGradOp>"
                         : sharding == "no-shard"      ? "Fsdp<NoShard>"
                                                       : "Fsdp<HybridShard>";
  }
  validate(choice.launch);  // the launcher's own rules, on the answers together
  return choice;
}

// The path to write: -o FILE, else asked. An existing file is replaced only with --force or
// when the user answers y; a folder is refused.
inline std::string wizard_output(const WizardRequest& request, Questions& questions) {
  // The error_code forms: a path that cannot be examined is written (and its failure reported)
  // rather than thrown past the `accel:` errors.
  const auto is_folder = [](const std::string& path) {
    std::error_code error;
    return std::filesystem::is_directory(path, error);
  };
  std::string path = request.output;
  if (path.empty())
    path = questions.ask("File to write", "launch.yaml", [&](const std::string& a) {
      if (is_folder(a))
        return "'" + a + "' is a folder; give a file's path, e.g. " + a + "/launch.yaml";
      return std::string();
    });
  if (is_folder(path))
    fail("accel-launch config: " + path + " is a folder; give a file's path with -o, e.g. -o " +
         path + "/launch.yaml");
  std::error_code error;
  if (!request.force && std::filesystem::exists(path, error) &&
      !questions.yes(path + " exists; replace it", false))
    fail("accel-launch config: kept " + path + " as it was, so nothing was written; give another "
         "file with -o FILE, or answer y to replace it");
  return path;
}

// `accel-launch config` with questions: asks, shows the YAML, writes it, and prints how to
// build and launch the choice.
inline int run_config_wizard(const WizardRequest& request, std::istream& in = std::cin,
                             std::ostream& out = std::cout) {
  Questions questions(in, out);
  const WizardChoice choice = ask_wizard_questions(questions, out);
  const std::string text = wizard_yaml(choice);
  out << "\nThe settings:\n\n" << text << "\n" << std::flush;
  const std::string path = wizard_output(request, questions);
  std::ofstream file(path, std::ios::trunc);
  file << text;
  file.flush();
  if (!file) fail("accel-launch config: cannot write " + path + "; give a writable path with -o");
  out << "accel-launch config: wrote " << path << "\n\n"
      << "Your program's Accelerator:\n"
      << "  using Strategy = " << alias_text(choice) << ";\n"
      << "Its executable, in CMake:\n"
      << "  accel_add_variants(train SOURCES train.cpp VARIANTS \"" << variant_text(choice)
      << "\")\n"
      << "Launch it with:\n"
      << "  accel-launch --config " << path << " -- ./" << variant_target(choice) << "\n"
      << std::flush;
  return 0;
}

}  // namespace accel::launcher
