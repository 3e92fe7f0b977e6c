// accel-launch checkpoint's command line; checkpoint_command.hpp includes it.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <charconv>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "../../detail/error.hpp"
#include "../../state/byte_size.hpp"
#include "../checkpoint_command.hpp"

namespace accel::state {

inline int checkpoint_command(int argc, const char* const* argv) {
  static constexpr std::string_view usage =
      "usage: accel-launch checkpoint inspect DIR\n"
      "       accel-launch checkpoint verify DIR\n"
      "       accel-launch checkpoint merge DIR OUT [--max-shard-size SIZE] [--model M] "
      "[--optimizer]\n"
      "       accel-launch checkpoint diff A B\n"
      "\n"
      "Reads a folder save_state wrote, without the program that wrote it (docs/how-to/resume.md).\n"
      "  inspect  step, world size, policies, tensors, optimizers, files and their checksums\n"
      "  verify   every checksum, and every parameter and optimizer slot covered exactly;\n"
      "           exits 1 and lists each problem when there is one\n"
      "  merge    the model's consolidated weights into OUT (new or empty), as save_model\n"
      "           writes them: model.safetensors, or shards of at most SIZE (default 10GiB;\n"
      "           5GB, 500MB, 2GiB, bytes) with model.safetensors.index.json; --model M picks\n"
      "           a model by prepare() order (default 0); --optimizer adds\n"
      "           optimizer.safetensors, each optimizer slot's state whole and flat\n"
      "  diff     tensor by tensor (models and optimizer state), bit for bit with NaN equal\n"
      "           to NaN at the same place: equal, or the largest absolute and relative\n"
      "           difference and the NaN counts; exits 1 when any differs\n"
      "\n"
      "Exit status: 0 done, 1 verify found a problem or diff a difference, 2 a usage error,\n"
      "a checkpoint that cannot be read or an OUT that cannot be made.\n";
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  auto usage_error = [&](const std::string& message) {
    std::fprintf(stderr, "accel: accel-launch checkpoint: %s\n\n%.*s", message.c_str(),
                 static_cast<int>(usage.size()), usage.data());
    return 2;
  };
  if (args.empty()) return usage_error("which subcommand: inspect, verify, merge or diff?");
  if (args[0] == "-h" || args[0] == "--help") {
    std::fwrite(usage.data(), 1, usage.size(), stdout);
    return 0;
  }
  const std::string_view command = args[0];
  std::vector<std::string_view> positional;
  MergeOptions merge;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const bool takes_value = arg == "--max-shard-size" || arg == "--model";
    if (takes_value && command != "merge")
      return usage_error(fmt::format("{} is merge's option, not {}'s", arg, command));
    if (takes_value && i + 1 == args.size())
      return usage_error(fmt::format("{} needs a value", arg));
    try {
      if (arg == "--max-shard-size") {
        merge.max_shard_bytes = detail::parse_byte_size(args[++i]);
      } else if (arg == "--model") {
        const std::string_view value = args[++i];
        const auto [end, error] =
            std::from_chars(value.data(), value.data() + value.size(), merge.model);
        if (error != std::errc() || end != value.data() + value.size())
          return usage_error(fmt::format("--model '{}' is not a model number (0, 1, ...)", value));
      } else if (arg == "--optimizer" && command == "merge") {
        merge.optimizer = true;
      } else if (arg.starts_with("-")) {
        return usage_error(fmt::format("unknown option '{}'", arg));
      } else {
        positional.push_back(arg);
      }
    } catch (const Error& e) {
      return usage_error(std::string(accel::detail::without_accel_prefix(e.what())));
    }
  }
  const std::size_t wanted = command == "merge" || command == "diff" ? 2 : 1;
  if (command != "inspect" && command != "verify" && command != "merge" && command != "diff")
    return usage_error(fmt::format("unknown subcommand '{}'", command));
  if (positional.size() != wanted)
    return usage_error(fmt::format("{} takes {} folder{}, not {}", command, wanted,
                                   wanted == 1 ? "" : "s", positional.size()));
  const std::filesystem::path first(positional[0]);
  try {
    if (command == "inspect") {
      std::fputs(describe_checkpoint(first).c_str(), stdout);
      return 0;
    }
    if (command == "verify") {
      const auto problems = verify_checkpoint(first);
      for (const auto& problem : problems) std::fprintf(stderr, "%s\n", problem.c_str());
      std::printf("%s: %s\n", first.c_str(),
                  problems.empty() ? "whole (every checksum and slice checked)"
                                   : fmt::format("{} problem{}", problems.size(),
                                                 problems.size() == 1 ? "" : "s")
                                         .c_str());
      return problems.empty() ? 0 : 1;
    }
    const std::filesystem::path second(positional[1]);
    if (command == "merge") {
      merge_checkpoint(first, second, merge);
      std::printf("%s: model #%zu's weights from %s\n", second.c_str(), merge.model, first.c_str());
      return 0;
    }
    std::size_t different = 0;
    for (const auto& row : diff_checkpoints(first, second)) {
      const std::string nan = row.nan_a + row.nan_b == 0
                                  ? std::string()
                                  : fmt::format("  NaN: {} in A, {} in B", row.nan_a, row.nan_b);
      if (row.status == "equal") {
        if (!nan.empty())  // equal, NaN at the same places: said, as it is seldom meant
          std::printf("%-48s equal, %lld NaN at the same places\n", row.name.c_str(),
                      static_cast<long long>(row.nan_a));
        continue;
      }
      ++different;
      if (row.status == "differs")
        std::printf("%-48s max abs %.6g  max rel %.6g%s\n", row.name.c_str(), row.max_abs,
                    row.max_rel, nan.c_str());
      else
        std::printf("%-48s %s\n", row.name.c_str(), row.status.c_str());
    }
    std::printf("%zu tensor%s differ%s\n", different, different == 1 ? "" : "s",
                different == 1 ? "s" : "");
    return different == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const c10::Error& e) {  // its what() carries a C++ stack trace
    std::fprintf(stderr, "accel: checkpoint %s: %s\n", std::string(command).c_str(),
                 e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "accel: checkpoint %s: out of memory reading '%s'; merge and diff hold a "
                 "checkpoint's rank files in memory whole: run it where more is free\n",
                 std::string(command).c_str(), first.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel: checkpoint %s: %s\n", std::string(command).c_str(), e.what());
  }
  return 2;
}

}  // namespace accel::state
