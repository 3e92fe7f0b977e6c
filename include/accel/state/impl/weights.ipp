// The weights folder's save and load; weights.hpp includes it in header-only mode.
#pragma once

#include <fmt/ranges.h>

#include "../weights.hpp"

namespace accel::state::detail {

ACCEL_DECL bool is_shard_name(std::string_view name) {
  const auto digits = [&](std::size_t at) {
    return name.substr(at, 5).find_first_not_of("0123456789") == std::string_view::npos;
  };
  return name.size() == 32 && name.starts_with("model-") && digits(6) &&
         name.substr(11, 4) == "-of-" && digits(15) && name.ends_with(".safetensors");
}

ACCEL_DECL std::vector<std::vector<std::size_t>> plan_shards(
    const std::vector<std::uint64_t>& bytes, std::uint64_t max_shard_bytes) {
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t filled = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!shards.back().empty() &&
        (bytes[i] > max_shard_bytes - filled || filled > max_shard_bytes)) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += bytes[i];
  }
  return shards;
}

ACCEL_DECL TemporaryFile::~TemporaryFile() {
  if (!committed_) ::unlink(path_.c_str());
}

ACCEL_DECL void TemporaryFile::commit() {
  if (::rename(path_.c_str(), final_.c_str()) != 0)
    posix::fail_errno(fmt::format("rename '{}' to", path_.string()), final_);
  committed_ = true;
}

ACCEL_DECL void check_filesystem(const std::error_code& error, std::string_view what,
                                 const std::filesystem::path& path) {
  if (error) accel::detail::fail("cannot {} '{}': {}", what, path.string(), error.message());
}

ACCEL_DECL bool path_exists(const std::filesystem::path& path) {
  std::error_code error;
  const bool found = std::filesystem::exists(path, error);
  check_filesystem(error, "look for", path);
  return found;
}

ACCEL_DECL std::map<std::string, std::string> read_weight_map(const std::filesystem::path& path) {
  using json = nlohmann::json;
  const std::string context = fmt::format("'{}' is not a valid weights index", path.string());
  const json index = safetensors::detail::parse_json(posix::read_file(path), context);
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
    accel::detail::fail(
        "{}: it must be a JSON object with a \"weight_map\" object of tensor name -> file name",
        context);
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : index.at("weight_map").items()) {
    if (!file.is_string())
      accel::detail::fail("{}: tensor {} maps to {}, not a file name", context,
                          safetensors::detail::show_name(tensor), safetensors::detail::shown(file));
    const auto& name = file.get_ref<const std::string&>();
    // A name from the file must not reach outside the folder.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      accel::detail::fail(
          "{}: tensor {} maps to {}; the index names files in its own folder, without '/'", context,
          safetensors::detail::show_name(tensor), safetensors::detail::show_name(name));
    map.emplace(tensor, name);
  }
  return map;
}

}  // namespace accel::state::detail

namespace accel::state {

ACCEL_DECL void save_weights(const std::filesystem::path& dir,
                             const std::vector<std::pair<std::string, torch::Tensor>>& named,
                             std::uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0)
    accel::detail::fail(
        "save_weights: max_shard_bytes is 0; it must be at least 1 (for example 5'000'000'000, "
        "transformers' default of 5 GB)");
  // Everything that can be refused is refused before a file is written.
  std::vector<std::uint64_t> bytes;
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : named) {
    if (!names.insert(name).second)
      accel::detail::fail("save_weights: two tensors are named {}; names must be unique",
                          safetensors::detail::show_name(name));
    bytes.push_back(
        tensor.defined() ? static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size() : 0);
  }
  const auto shards = detail::plan_shards(bytes, max_shard_bytes);
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> files;
  for (const auto& shard : shards) {
    auto& file = files.emplace_back();
    for (const std::size_t i : shard) file.push_back(named[i]);
    safetensors::detail::plan(file, {});  // checks dtypes and layouts
  }

  std::error_code error;
  std::filesystem::create_directories(dir, error);
  detail::check_filesystem(error, "create the folder", dir);
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  std::set<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  std::uint64_t total = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string name =
        files.size() == 1 ? std::string(weights_file) : weights_shard_name(f + 1, files.size());
    detail::TemporaryFile temporary(dir / name);
    safetensors::write_file(temporary.path(), files[f], metadata);
    temporary.commit();
    written.insert(name);
    for (std::size_t k = 0; k < files[f].size(); ++k) {
      weight_map[files[f][k].first] = name;
      total += bytes[shards[f][k]];
    }
  }
  if (files.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";  // as transformers writes it (sorted keys)
    detail::TemporaryFile temporary(dir / weights_index_file);
    {
      posix::Descriptor file(temporary.path(), O_WRONLY | O_CREAT | O_TRUNC);
      file.write_all(text.data(), text.size());
      file.sync();
      file.close();
    }
    temporary.commit();
    written.insert(std::string(weights_index_file));
  }
  // The other layout's files, and shards of an earlier save with another count.
  std::filesystem::directory_iterator listing(dir, error);
  detail::check_filesystem(error, "list", dir);
  for (const auto& entry : listing) {
    const std::string name = entry.path().filename().string();
    const bool ours =
        name == weights_file || name == weights_index_file || detail::is_shard_name(name);
    if (ours && !written.contains(name)) {
      std::filesystem::remove(entry.path(), error);
      detail::check_filesystem(error, "remove the stale", entry.path());
    }
  }
  posix::sync_folder(dir);
}

ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> load_weights(
    const std::filesystem::path& dir) {
  const WeightsReader reader(dir);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& tensor : reader.tensors())
    out.emplace_back(tensor.name, reader.read(tensor).view(tensor.entry.shape));
  return out;
}

ACCEL_DECL std::string NameCheck::describe(std::size_t limit) const {
  const auto list = [&](std::string_view what, const std::vector<std::string>& names) {
    std::vector<std::string> shown;
    for (std::size_t i = 0; i < names.size() && i < limit; ++i)
      shown.push_back(safetensors::detail::show_name(names[i]));
    return fmt::format(
        "{} {}: {}{}", what, names.size(), fmt::join(shown, ", "),
        names.size() > limit ? fmt::format(" and {} more", names.size() - limit) : "");
  };
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(list("missing", missing));
  if (!unexpected.empty()) parts.push_back(list("unexpected", unexpected));
  return fmt::format("{}", fmt::join(parts, "; "));
}

ACCEL_DECL NameCheck compare_names(const std::vector<std::string>& expected,
                                   const std::vector<std::string>& found) {
  const std::unordered_set<std::string> want(expected.begin(), expected.end()),
      have(found.begin(), found.end());
  NameCheck check;
  for (const auto& name : expected)
    if (!have.contains(name)) check.missing.push_back(name);
  for (const auto& name : found)
    if (!want.contains(name)) check.unexpected.push_back(name);
  return check;
}

}  // namespace accel::state
