// The environment report; environment_report.hpp includes it.
#pragma once

#include "../environment_report.hpp"

namespace accel::diagnostics::detail {

inline std::string field_of(const char* path, std::string_view key, char separator) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key)) {
      const auto at = line.find(separator);
      if (at == std::string::npos) continue;
      std::string value = line.substr(at + 1);
      value.erase(0, value.find_first_not_of(" \t\""));
      while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
      return value;
    }
  return "unknown";
}

inline std::string loaded_blas() {
  (void)torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  std::set<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = std::filesystem::path(path).filename();
    if (name.find("blas") == std::string::npos && name.find("mkl") == std::string::npos &&
        name.find("lapack") == std::string::npos)
      continue;
    std::error_code error;
    const auto real = std::filesystem::canonical(path, error);
    found.insert(error ? path : real.string());
  }
  std::string text;
  for (const auto& path : found) text += (text.empty() ? "" : ", ") + path;
  if (text.empty()) return "none loaded (libtorch's own kernels)";
  if (text.find("openblas") == std::string::npos && text.find("mkl") == std::string::npos &&
      text.find("blis") == std::string::npos)
    text += " (the reference BLAS is slow: install libopenblas0-pthread)";
  return text;
}

inline bool distributed_variable(std::string_view name) {
  static constexpr std::string_view exact[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE",
                                               "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                                               "MASTER_PORT", "CUDA_VISIBLE_DEVICES"};
  static constexpr std::string_view prefixes[] = {"ACCEL_", "TORCH_", "TORCHELASTIC_", "SLURM_",
                                                  "OMPI_COMM_WORLD_", "PMI_", "GLOO_", "NCCL_",
                                                  "OMP_", "MKL_", "OPENBLAS_"};
  for (const auto e : exact)
    if (name == e) return true;
  for (const auto p : prefixes)
    if (name.starts_with(p)) return true;
  return false;
}

}  // namespace accel::diagnostics::detail

namespace accel::diagnostics {

inline Report environment_report() {
  Report report;
  auto add = [&](std::string name, std::string value) {
    report.emplace_back(std::move(name), std::move(value));
  };
  add("accel", fmt::format("{}.{}.{}", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR,
                           ACCEL_VERSION_PATCH));
  add("libtorch", TORCH_VERSION);
#if defined(__clang__)
  add("compiler", fmt::format("clang {} (this program), C++ {}", __clang_version__, __cplusplus));
#elif defined(__GNUC__)
  add("compiler", fmt::format("g++ {} (this program), C++ {}", __VERSION__, __cplusplus));
#endif
  add("cxx11 abi", fmt::format("{}", _GLIBCXX_USE_CXX11_ABI));
  utsname system{};
  ::uname(&system);
  add("os", fmt::format("{} ({} {} {})", detail::field_of("/etc/os-release", "PRETTY_NAME", '='),
                        system.sysname, system.release, system.machine));
  add("glibc", gnu_get_libc_version());

  const bool cuda = torch::cuda::is_available();
  add("cuda", cuda ? fmt::format("available, {} device(s), cuDNN {}", torch::cuda::device_count(),
                                 torch::cuda::cudnn_is_available() ? "available" : "unavailable")
                   : "unavailable (no CUDA build of libtorch, or no device)");
#ifdef USE_C10D_NCCL
  add("nccl", "built in (c10d ProcessGroupNCCL)");
#else
  add("nccl", "not built into this libtorch");
#endif
#ifdef ACCEL_HAS_GLOO
  add("gloo", "built in (c10d ProcessGroupGloo)");
#else
  add("gloo", "not found at build time: multi-process CPU runs are unavailable");
#endif
  // CPU tensors between the ranks of one node go through a segment in /dev/shm
  // (docs/concepts/distributed.md): whether it is on, and the room it has.
  struct statvfs shm_fs {};
  const bool shm_ok = ::statvfs("/dev/shm", &shm_fs) == 0;
  const char* shm_setting = std::getenv("ACCEL_SHARED_MEMORY");
  add("shared memory",
      fmt::format("{} between the ranks of one node; /dev/shm: {}",
                  shm_setting != nullptr && std::string_view(shm_setting) == "0"
                      ? "off (ACCEL_SHARED_MEMORY=0)"
                      : "on",
                  shm_ok ? fmt::format("{} MiB free", static_cast<unsigned long long>(
                                                          shm_fs.f_bavail) *
                                                          shm_fs.f_frsize / (1024 * 1024))
                         : "missing: one-node runs fail at start unless ACCEL_SHARED_MEMORY=0"));
  add("cpu", detail::field_of("/proc/cpuinfo", "model name", ':'));
  cpu_set_t usable;
  CPU_ZERO(&usable);
  const int affinity = ::sched_getaffinity(0, sizeof usable, &usable) == 0 ? CPU_COUNT(&usable) : -1;
  add("cores", fmt::format("{} online, {} usable by this process",
                           std::thread::hardware_concurrency(), affinity));
  add("torch threads", fmt::format("{} intra-op, {} inter-op", at::get_num_threads(),
                                   at::get_num_interop_threads()));
  add("memory", detail::field_of("/proc/meminfo", "MemTotal", ':'));
  add("blas", detail::loaded_blas());

  std::vector<std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const auto equals = text.find('=');
    if (equals != std::string_view::npos && detail::distributed_variable(text.substr(0, equals)))
      variables.emplace_back(text);
  }
  std::sort(variables.begin(), variables.end());
  std::string joined;
  for (const auto& v : variables) joined += (joined.empty() ? "" : " ") + v;
  add("variables", joined.empty() ? "none set" : joined);
  return report;
}

inline std::string to_text(const Report& report) {
  std::string text;
  for (const auto& [name, value] : report) text += fmt::format("{}: {}\n", name, value);
  return text;
}

}  // namespace accel::diagnostics
