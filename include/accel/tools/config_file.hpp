// accel-launch's settings from a YAML file (yaml-cpp), as Accelerate's `accelerate launch
// --config_file` reads its own:
//
//   nproc: 4
//   nnodes: 2
//   node-rank: 0
//   master-addr: 10.0.0.1
//   master-port: 29500
//   grace: 5
//   rank-prefix: true
//   max-restarts: 3
//   threads-per-process: 8      # OMP_NUM_THREADS in every worker
//   env:                        # set for every worker
//     NCCL_DEBUG: INFO
//
// Keys are the command-line flags without their dashes in front; flags given on the command
// line override the file. An unknown or repeated key, a value of the wrong type or out of range,
// an `env` name setenv() would refuse, a second YAML document and a folder instead of a file are
// `accel:` errors naming the file, the line and the key. `accel-launch config` writes such a file
// from flags.
//
// Longer than accel's headers should be: the keys' table, reading them with their checks, and
// writing them back (`accel-launch config`) stay in one place, so that each key is written once.
// Only accel-launch includes it (yaml-cpp is no dependency of a training program); the rest of
// the launcher does not.
#pragma once

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../launch/command_line.hpp"
#include "../launch/environment.hpp"
#include "../launch/error.hpp"

namespace accel::launcher {

enum class ConfigType { whole_number, seconds, text, flag, environment };

struct ConfigKey {
  std::string_view name;
  ConfigType type;
  std::string_view example;
};

inline constexpr ConfigKey config_keys[] = {
    {"nproc", ConfigType::whole_number, "nproc: 4"},
    {"nnodes", ConfigType::whole_number, "nnodes: 2"},
    {"node-rank", ConfigType::whole_number, "node-rank: 0"},
    {"master-addr", ConfigType::text, "master-addr: 10.0.0.1"},
    {"master-port", ConfigType::whole_number, "master-port: 29500"},
    {"grace", ConfigType::seconds, "grace: 5"},
    {"rank-prefix", ConfigType::flag, "rank-prefix: true"},
    {"max-restarts", ConfigType::whole_number, "max-restarts: 3"},
    {"min-nodes", ConfigType::whole_number, "min-nodes: 1"},
    {"rendezvous-deadline", ConfigType::seconds, "rendezvous-deadline: 30"},
    {"threads-per-process", ConfigType::whole_number, "threads-per-process: 8"},
    {"env", ConfigType::environment, "env: {NCCL_DEBUG: INFO}"},
};

// What a file (or the command line) sets beyond what parse_launch_command_line reads.
struct LaunchExtras {
  std::optional<int> threads_per_process;
  std::vector<std::pair<std::string, std::string>> environment;
};

// A file's settings: the flags they amount to (for parse_launch_command_line, before the user's
// own flags so that those win) and the extras.
struct LaunchConfig {
  std::vector<std::string> flags;
  LaunchExtras extras;
};

inline std::string config_key_list() {
  std::string list;
  for (const auto& key : config_keys) list += (list.empty() ? "" : ", ") + std::string(key.name);
  return list;
}

// The most threads one worker may ask for. The largest machines have about a thousand hardware
// threads (two 192-core CPUs with SMT: 768), and OpenMP starts every thread asked for, each with
// its own stack, whatever the cores: a bigger number is a typo (100000 for 10) that would
// oversubscribe the node or exhaust its memory, not a setting.
inline constexpr int max_threads_per_process = 1024;

// A whole-number setting given as a string: checked as the command line would check it.
inline int threads_value(std::string_view text, const std::string& shown) {
  const int value = parse_whole_number(text, shown, "give threads per worker, e.g. 8");
  if (value < 1) fail(shown + " is out of range; give at least 1 thread per worker, e.g. 8");
  if (value > max_threads_per_process)
    fail(shown + " is out of range; give at most " + std::to_string(max_threads_per_process) +
         " threads per worker (no more than the node's cores), e.g. 8");
  return value;
}

// Whether setenv() takes `name`: it refuses an empty name and one with '=' (EINVAL; '=' ends the
// name in an environment entry), and a NUL would cut the name short. The same rule for a file's
// `env` and for `accel-launch config --env NAME=VALUE`, so that no variable is dropped on the way
// to the workers.
inline bool is_variable_name(std::string_view name) {
  return !name.empty() && name.find('=') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// A name as a message shows it: a NUL in it, which would end the message there, as \0.
inline std::string shown_name(std::string_view name) {
  std::string shown;
  for (const char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return shown;
}

inline std::string line_of(const YAML::Node& node) { return std::to_string(node.Mark().line + 1); }

// The file's text. yaml-cpp reads a stream's buffer directly, so a read error (a folder opens
// fine and fails on the first read, EISDIR) escapes it as std::ios_base::failure and aborts
// accel-launch: the file is read here, every failure an `accel:` error.
inline std::string read_config_text(const std::string& path) {
  const auto unreadable = [&](const std::string& why) {
    fail("--config " + path + " cannot be read (" + why +
         "); give the path of a YAML file, e.g. one written by accel-launch config");
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) unreadable(std::generic_category().message(errno));
  if (S_ISDIR(info.st_mode))
    fail("--config " + path + " is a folder, not a YAML file; give the path of a file in it, "
         "e.g. --config " + path + "/launch.yaml");
  std::string text;
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) unreadable(std::generic_category().message(errno));
    char buffer[4096];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
      text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (in.bad()) unreadable("a read failed");
  } catch (const std::ios_base::failure& error) {
    unreadable(error.code().message());
  }
  return text;
}

// The file's one document (a null node when the file is empty). A file may hold several YAML
// documents ('---' between them); reading the first alone would ignore the rest without a word.
inline YAML::Node parse_config_document(const std::string& path, const std::string& text) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::ParserException& error) {
    fail(path + ":" + std::to_string(error.mark.line + 1) + ": not valid YAML: " + error.msg);
  }
  if (documents.empty()) return YAML::Node();
  for (std::size_t i = 1; i < documents.size(); ++i)  // an empty one ('---' at the end) holds nothing
    if (!documents[i].IsNull())
      fail(path + ":" + line_of(documents[i]) +
           ": a second YAML document (after a '---' line); accel-launch reads one document per "
           "file: remove the '---' and put all the settings in one mapping");
  return documents.front();
}

// Checks that every key of a mapping is a plain name and appears once: yaml-cpp keeps every entry
// of a mapping, a repeated one too, and reading them in order would let the last win without a
// word. `what` says whose keys they are in a message.
inline void check_config_keys(const YAML::Node& map, const std::string& path,
                              const std::string& what) {
  std::vector<std::string> keys;
  std::vector<std::string> lines;
  for (const auto& entry : map) {
    const std::string line = line_of(entry.first);
    // as<std::string>() throws past the `accel:` errors for a key that is a list or a mapping.
    if (!entry.first.IsScalar())
      fail(path + ":" + line + ": " + what + " has a key that is not a name; write name: value");
    const std::string key = entry.first.Scalar();
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key)
        fail(path + ":" + line + ": " + what + " has '" + key + "' twice, on lines " + lines[i] +
             " and " + line + "; keep one of them");
    keys.push_back(key);
    lines.push_back(line);
  }
}

// The `env` mapping: every variable a single value under a name setenv() takes, none of those
// the launcher sets itself.
inline void read_config_environment(const YAML::Node& value, const std::string& where,
                                    const std::string& path, LaunchExtras& extras) {
  const std::string example = "; e.g. env: {NCCL_DEBUG: INFO}";
  if (!value.IsMap()) fail(where + "'env' must be a mapping of variable names to values" + example);
  check_config_keys(value, path, "'env'");
  for (const auto& variable : value) {
    const std::string name = variable.first.Scalar();
    const std::string at = path + ":" + line_of(variable.first) + ": 'env' ";
    if (!is_variable_name(name))
      fail(at + "has '" + shown_name(name) + "', which is not a variable name: a name must be non-empty and "
           "contain no '=' (nor a NUL)" + example);
    if (is_launcher_variable(name))
      fail(at + "sets " + name + ", which the launcher sets for every worker itself" + example);
    if (!variable.second.IsScalar())
      fail(at + "sets " + name + " to something other than a single value" + example);
    extras.environment.emplace_back(name, variable.second.Scalar());
  }
}

inline LaunchConfig read_launch_config(const std::string& path) {
  const YAML::Node root = parse_config_document(path, read_config_text(path));
  LaunchConfig config;
  if (root.IsNull()) return config;  // an empty file sets nothing
  if (!root.IsMap())
    fail(path + ": the file must be a mapping of settings (key: value), e.g. nproc: 4");
  check_config_keys(root, path, "the file");
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    const YAML::Node& value = entry.second;
    const std::string where = path + ":" + line_of(entry.first) + ": ";
    const ConfigKey* known = nullptr;
    for (const auto& candidate : config_keys)
      if (candidate.name == key) known = &candidate;
    if (known == nullptr) {
      std::string hint;
      std::string dashed = key;
      for (char& c : dashed) c = c == '_' ? '-' : c;
      for (const auto& candidate : config_keys)
        if (candidate.name == dashed) hint = "; did you mean '" + dashed + "'?";
      fail(where + "unknown key '" + key + "'" + hint + " The keys are: " + config_key_list());
    }
    auto wrong = [&](const std::string& what) {
      fail(where + "'" + key + "' " + what + "; e.g. " + std::string(known->example));
    };
    if (known->type == ConfigType::environment) {
      read_config_environment(value, where, path, config.extras);
      continue;
    }
    if (!value.IsScalar()) wrong("must be a single value");
    const std::string text = value.as<std::string>();
    switch (known->type) {
      case ConfigType::whole_number: {
        int number = 0;
        try {
          number = value.as<int>();
        } catch (const YAML::Exception&) {
          wrong("is '" + text + "', not a whole number");
        }
        if (key == "threads-per-process") {
          config.extras.threads_per_process =
              threads_value(std::to_string(number), where + key + " '" + text + "'");
          continue;
        }
        config.flags.insert(config.flags.end(), {"--" + key, std::to_string(number)});
        break;
      }
      case ConfigType::seconds: {
        double seconds = 0;
        try {
          seconds = value.as<double>();
        } catch (const YAML::Exception&) {
          wrong("is '" + text + "', not a number of seconds");
        }
        if (!std::isfinite(seconds)) wrong("is '" + text + "', not a number of seconds");
        config.flags.insert(config.flags.end(), {"--" + key, text});
        break;
      }
      case ConfigType::text:
        if (text.empty()) wrong("is empty");
        config.flags.insert(config.flags.end(), {"--" + key, text});
        break;
      case ConfigType::flag: {
        bool on = false;
        try {
          on = value.as<bool>();
        } catch (const YAML::Exception&) {
          wrong("is '" + text + "', not true or false");
        }
        if (on) config.flags.push_back("--" + key);
        break;
      }
      case ConfigType::environment: break;
    }
  }
  return config;
}

// accel-launch's arguments with `--config FILE` and `--threads-per-process N` (before the
// command) taken out and applied: the file's flags come first, so the command line's win.
struct ConfiguredLine {
  std::vector<std::string> arguments;  // argv[0] first, for parse_launch_command_line
  LaunchExtras extras;
  std::string config_path;  // empty: no --config
};

inline ConfiguredLine apply_launch_config(int argc, const char* const* argv) {
  ConfiguredLine line;
  std::vector<std::string> rest;
  std::optional<int> threads_flag;
  static constexpr std::string_view with_value[] = {
      "--nproc", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--grace",
      "--max-restarts", "--min-nodes", "--rendezvous-deadline"};
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--" || !arg.starts_with("-") || arg == "-") break;
    const auto equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    auto value = [&]() -> std::string {
      if (equals != std::string_view::npos) return std::string(arg.substr(equals + 1));
      if (i + 1 >= argc) fail(std::string(name) + " needs a value; run accel-launch --help");
      return argv[++i];
    };
    if (name == "--config") {
      line.config_path = value();
    } else if (name == "--threads-per-process") {
      const std::string text = value();
      threads_flag = threads_value(text, "--threads-per-process '" + text + "'");
    } else {
      rest.emplace_back(arg);
      for (const auto option : with_value)
        if (name == option && equals == std::string_view::npos && i + 1 < argc)
          rest.emplace_back(argv[++i]);
    }
  }
  for (; i < argc; ++i) rest.emplace_back(argv[i]);

  line.arguments.emplace_back(argc > 0 ? argv[0] : "accel-launch");
  if (!line.config_path.empty()) {
    LaunchConfig config = read_launch_config(line.config_path);
    line.arguments.insert(line.arguments.end(), config.flags.begin(), config.flags.end());
    line.extras = std::move(config.extras);
  }
  if (threads_flag) line.extras.threads_per_process = threads_flag;
  line.arguments.insert(line.arguments.end(), rest.begin(), rest.end());
  return line;
}

// Sets the extras in this process, whose environment the workers inherit: the file's variables
// and OMP_NUM_THREADS (which the launcher then leaves as it is, threads.hpp).
inline void apply_launch_extras(const LaunchExtras& extras) {
  for (const auto& [name, value] : extras.environment)  // names checked: is_variable_name
    if (::setenv(name.c_str(), value.c_str(), 1) != 0) fail_with_errno("cannot set " + name);
  if (extras.threads_per_process)
    ::setenv("OMP_NUM_THREADS", std::to_string(*extras.threads_per_process).c_str(), 1);
}

// `accel-launch config [-o FILE] [--force] [flags]`: the YAML for the given flags
// (config_wizard.hpp asks for them instead).
inline int write_launch_config(int argc, const char* const* argv) {
  std::string output;
  bool force = false;
  YAML::Emitter yaml;
  yaml << YAML::BeginMap;
  std::vector<std::pair<std::string, std::string>> environment;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(std::string(arg) + " needs a value; run accel-launch config --help");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(
          "usage: accel-launch config [-o FILE] [--force] [--nproc N] [--nnodes M]\n"
          "           [--node-rank K] [--master-addr H] [--master-port P] [--grace S]\n"
          "           [--rank-prefix] [--threads-per-process T] [--env NAME=VALUE]...\n"
          "\n"
          "       accel-launch config --interactive [-o FILE] [--force]\n"
          "\n"
          "Writes the settings given as a YAML file for accel-launch --config FILE (to stdout\n"
          "without -o). An existing FILE is kept unless --force. With --interactive, or with\n"
          "stdin a terminal and no setting given, asks for each setting instead.\n",
          stdout);
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      output = value();
    } else if (arg == "--force") {
      force = true;
    } else if (arg == "--rank-prefix") {
      yaml << YAML::Key << "rank-prefix" << YAML::Value << true;
    } else if (arg == "--env") {
      const std::string pair = value();
      const auto equals = pair.find('=');
      if (equals == std::string::npos || !is_variable_name(pair.substr(0, equals)))
        fail("--env '" + pair + "' is not NAME=VALUE; e.g. --env NCCL_DEBUG=INFO");
      const std::string name = pair.substr(0, equals);
      // The file would be refused when used (read_config_environment): refused now instead.
      if (is_launcher_variable(name))
        fail("--env " + name + ": the launcher sets " + name + " for every worker itself; leave it "
             "out");
      environment.emplace_back(name, pair.substr(equals + 1));
    } else if (arg.starts_with("--")) {
      const std::string key(arg.substr(2));
      const ConfigKey* known = nullptr;
      for (const auto& candidate : config_keys)
        if (candidate.name == key && candidate.type != ConfigType::environment) known = &candidate;
      if (known == nullptr)
        fail("accel-launch config: unknown option '" + std::string(arg) +
             "'; run accel-launch config --help");
      const std::string text = value();
      // The type checked now, rather than when the file is used; ranges are checked there.
      if (key == "threads-per-process") {
        yaml << YAML::Key << key << YAML::Value
             << threads_value(text, std::string(arg) + " '" + text + "'");
        continue;
      }
      if (known->type == ConfigType::whole_number)
        (void)parse_whole_number(text, std::string(arg) + " '" + text + "'",
                                 "give a whole number, e.g. " + std::string(arg) + " 4");
      if (known->type == ConfigType::seconds) (void)parse_seconds(text, arg);
      yaml << YAML::Key << key << YAML::Value;
      if (known->type == ConfigType::whole_number) yaml << std::stoi(text);
      else yaml << text;
    } else {
      fail("accel-launch config: unexpected argument '" + std::string(arg) +
           "'; it takes flags only, e.g. accel-launch config --nproc 4 -o launch.yaml");
    }
  }
  if (!environment.empty()) {
    yaml << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
    for (const auto& [name, value] : environment) yaml << YAML::Key << name << YAML::Value << value;
    yaml << YAML::EndMap;
  }
  yaml << YAML::EndMap;
  const std::string text = std::string(yaml.c_str()) + "\n";
  if (output.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (!force && std::ifstream(output))
    fail("accel-launch config: " + output + " exists; pass --force to replace it");
  std::ofstream out(output, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) fail("accel-launch config: cannot write " + output);
  std::fprintf(stderr, "accel-launch config: wrote %s\n", output.c_str());
  return 0;
}

}  // namespace accel::launcher
