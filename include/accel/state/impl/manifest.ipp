// Manifest's JSON layout; manifest.hpp includes it in header-only mode.
#pragma once

#include <fmt/format.h>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../checkpoint_folder.hpp"
#include "../checksum.hpp"
#include "../manifest.hpp"
#include "../posix_file.hpp"

namespace accel::state {

namespace detail {

// The manifest's own checksum: XXH3-64 of its text without the "manifest_xxh3" field, so that
// a flipped bit in a step count or a learning rate is caught like one in a rank file.
inline constexpr const char* manifest_checksum_key = "manifest_xxh3";

inline std::string manifest_checksum(nlohmann::json manifest) {
  manifest.erase(manifest_checksum_key);
  const std::string text = manifest.dump(1);
  return checksum_hex(checksum(text.data(), text.size()));
}

ACCEL_DECL std::optional<std::string> shape_problem(const std::vector<std::int64_t>& shape) {
  std::int64_t elements = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return fmt::format("whose dimension {} is negative", d);
    if (__builtin_mul_overflow(elements, d, &elements))
      return std::string("whose element count overflows 64 bits");
  }
  return std::nullopt;
}

}  // namespace detail

// `at` throws on a missing key, which read() reports as a layout error.
ACCEL_DECL void to_json(nlohmann::json& j, const TensorRecord& r) {
  j = {{"name", r.name}, {"shape", r.shape}, {"dtype", r.dtype}};
  if (r.tensor_parallel_dim >= 0) j["tensor_parallel_dim"] = r.tensor_parallel_dim;
}
ACCEL_DECL void from_json(const nlohmann::json& j, TensorRecord& r) {
  j.at("name").get_to(r.name);
  j.at("shape").get_to(r.shape);
  j.at("dtype").get_to(r.dtype);
  if (j.contains("tensor_parallel_dim")) j.at("tensor_parallel_dim").get_to(r.tensor_parallel_dim);
}
ACCEL_DECL void to_json(nlohmann::json& j, const ModelRecord& r) {
  j = {{"parameters", r.parameters}, {"buffers", r.buffers}};
}
ACCEL_DECL void from_json(const nlohmann::json& j, ModelRecord& r) {
  j.at("parameters").get_to(r.parameters);
  j.at("buffers").get_to(r.buffers);
}
ACCEL_DECL void to_json(nlohmann::json& j, const ParamGroupRecord& r) {
  j = {{"parameters", r.parameters}, {"options", r.options}};
}
ACCEL_DECL void from_json(const nlohmann::json& j, ParamGroupRecord& r) {
  j.at("parameters").get_to(r.parameters);
  r.options = j.at("options");
}
ACCEL_DECL void to_json(nlohmann::json& j, const OptimizerRecord& r) {
  j = {{"type", r.type}, {"groups", r.groups}};
}
ACCEL_DECL void from_json(const nlohmann::json& j, OptimizerRecord& r) {
  j.at("type").get_to(r.type);
  j.at("groups").get_to(r.groups);
}
ACCEL_DECL void to_json(nlohmann::json& j, const LoaderRecord& r) {
  j = {{"epoch", r.epoch},   {"batches_consumed", r.batches_consumed},
       {"global_batches_consumed", r.global_batches_consumed},
       {"samples", r.samples}, {"batch_size", r.batch_size},
       {"shuffle", r.shuffle}, {"seed", r.seed}};
}
ACCEL_DECL void from_json(const nlohmann::json& j, LoaderRecord& r) {
  j.at("epoch").get_to(r.epoch);
  j.at("batches_consumed").get_to(r.batches_consumed);
  j.at("global_batches_consumed").get_to(r.global_batches_consumed);
  j.at("samples").get_to(r.samples);
  j.at("batch_size").get_to(r.batch_size);
  j.at("shuffle").get_to(r.shuffle);
  j.at("seed").get_to(r.seed);
}
ACCEL_DECL void to_json(nlohmann::json& j, const FileRecord& r) {
  j = {{"name", r.name}, {"bytes", r.bytes}, {"xxh3", r.xxh3}};
}
ACCEL_DECL void from_json(const nlohmann::json& j, FileRecord& r) {
  j.at("name").get_to(r.name);
  j.at("bytes").get_to(r.bytes);
  j.at("xxh3").get_to(r.xxh3);
}

ACCEL_DECL std::string Manifest::text() const {
  nlohmann::json schedulers = nlohmann::json::array();
  for (const unsigned count : scheduler_steps) schedulers.push_back({{"step_count", count}});
  nlohmann::json j{{"format", "accel-checkpoint"},
                   {"format_version", format_version},
                   {"accel_version", accel_version},
                   {"libtorch_version", libtorch_version},
                   {"world_size", world_size},
                   {"mesh", {{"data_parallel", world_size / tensor_parallel},
                             {"tensor_parallel", tensor_parallel}}},
                   {"parallelism", parallelism},
                   {"precision", precision},
                   {"accumulation_steps", accumulation_steps},
                   {"split_batches", split_batches},
                   {"completed_steps", completed_steps},
                   {"models", models},
                   {"optimizers", optimizers},
                   {"schedulers", schedulers},
                   {"loaders", loaders},
                   {"window", {{"length", window.length},
                               {"position", window.position},
                               {"collecting", window.collecting}}},
                   {"precision_state", precision_state},
                   {"custom_objects", custom_objects},
                   {"files", files},
                   {"run", {{"id", run_id}, {"resumed_from", resumed_from}}}};
  j[detail::manifest_checksum_key] = detail::manifest_checksum(j);
  return j.dump(1);
}

ACCEL_DECL Manifest Manifest::read(const std::filesystem::path& folder, std::string_view call) {
  using json = nlohmann::json;
  const std::filesystem::path path = folder / manifest_name;
  const std::string where = path.string();
  if (!std::filesystem::is_regular_file(path))
    accel::detail::fail("{}: '{}' has no {}: it is not a checkpoint, or its save did not complete "
                        "(the manifest is written last)",
                        call, folder.string(), manifest_name);
  json j;
  try {
    j = json::parse(posix::read_file(path));
  } catch (const json::exception& e) {
    accel::detail::fail("{}: '{}' is not valid JSON ({})", call, where, e.what());
  }
  auto field = [&](const char* key) -> const json& {
    if (!j.is_object() || !j.contains(key))
      accel::detail::fail("{}: '{}' has no '{}'", call, where, key);
    return j[key];
  };
  Manifest m;
  try {
    m.format_version = field("format_version").get<int>();
    if (field("format") != "accel-checkpoint" || m.format_version < 1 ||
        m.format_version > checkpoint_format_version)
      accel::detail::fail("{}: '{}' is format {} version {}; this accel reads accel-checkpoint "
                          "versions 1 to {}",
                          call, where, field("format").dump(), field("format_version").dump(),
                          checkpoint_format_version);
    if (m.format_version >= 2) {
      const std::string sum = detail::manifest_checksum(j);
      const std::string said = field(detail::manifest_checksum_key).get<std::string>();
      if (sum != said)
        accel::detail::fail("{}: '{}' has checksum {}, its {} says {}; the manifest is corrupt",
                            call, where, sum, detail::manifest_checksum_key, said);
    }
    field("accel_version").get_to(m.accel_version);
    field("libtorch_version").get_to(m.libtorch_version);
    field("world_size").get_to(m.world_size);
    if (j.contains("mesh")) j["mesh"].at("tensor_parallel").get_to(m.tensor_parallel);
    field("parallelism").get_to(m.parallelism);
    field("precision").get_to(m.precision);
    field("accumulation_steps").get_to(m.accumulation_steps);
    field("split_batches").get_to(m.split_batches);
    field("completed_steps").get_to(m.completed_steps);
    field("models").get_to(m.models);
    field("optimizers").get_to(m.optimizers);
    for (const auto& scheduler : field("schedulers"))
      m.scheduler_steps.push_back(scheduler.at("step_count").get<unsigned>());
    field("loaders").get_to(m.loaders);
    const json& window = field("window");
    window.at("length").get_to(m.window.length);
    window.at("position").get_to(m.window.position);
    window.at("collecting").get_to(m.window.collecting);
    m.precision_state = field("precision_state");
    field("custom_objects").get_to(m.custom_objects);
    field("files").get_to(m.files);
    if (j.contains("run")) {
      j["run"].at("id").get_to(m.run_id);
      j["run"].at("resumed_from").get_to(m.resumed_from);
    }
  } catch (const json::exception& e) {
    accel::detail::fail("{}: '{}' does not have the layout of format version {} ({})", call, where,
                        checkpoint_format_version, e.what());
  }
  for (const FileRecord& file : m.files)
    if (file.name.empty() || file.name == "." || file.name == ".." ||
        file.name.find('/') != std::string::npos)
      accel::detail::fail("{}: '{}' names the file '{}'; a checkpoint's files are plain names in "
                          "its folder",
                          call, where, file.name);
  if (m.world_size < 1 || m.world_size > max_world_size)
    accel::detail::fail("{}: '{}' says world_size {}; a checkpoint comes from 1 to {} processes, "
                        "so the manifest is corrupt",
                        call, where, m.world_size, max_world_size);
  if (m.tensor_parallel < 1 || m.world_size % m.tensor_parallel != 0)
    accel::detail::fail("{}: '{}' says its mesh has tensor-parallel degree {} on {} processes, "
                        "which does not divide them; the manifest is corrupt",
                        call, where, m.tensor_parallel, m.world_size);
  for (std::size_t i = 0; i < m.models.size(); ++i)
    for (const auto* list : {&m.models[i].parameters, &m.models[i].buffers})
      for (const TensorRecord& t : *list)
        if (const auto problem = detail::shape_problem(t.shape))
          accel::detail::fail("{}: '{}' gives '{}' of model #{} the shape [{}], {}; the manifest "
                              "is corrupt",
                              call, where, t.name, i, accel::detail::shape_text(t.shape),
                              *problem);
        else if (const int dim = t.tensor_parallel_dim;
                 dim >= static_cast<int>(t.shape.size()) ||
                 (dim >= 0 && t.shape[static_cast<std::size_t>(dim)] % m.tensor_parallel != 0))
          accel::detail::fail("{}: '{}' says '{}' of model #{} (shape [{}]) is split along "
                              "dimension {} over {} tensor-parallel ranks, which it cannot be; "
                              "the manifest is corrupt",
                              call, where, t.name, i, accel::detail::shape_text(t.shape),
                              t.tensor_parallel_dim, m.tensor_parallel);
  return m;
}

}  // namespace accel::state
