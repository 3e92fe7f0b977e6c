// What register_for_checkpointing() accepts and how each kind is kept: an object with torch's
// save(OutputArchive&) / load(InputArchive&) pair (a module, a struct of yours) goes through a
// torch::serialize archive; a trivially copyable struct is kept as its bytes. Loading is staged:
// stage() reads and checks the bytes without touching the object and returns what applies them,
// so that a bad checkpoint leaves every object as it was.
#pragma once

#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

#include "../detail/error.hpp"

namespace accel::state {

template <class T>
concept ArchiveSerializable = requires(T& object, torch::serialize::OutputArchive& out,
                                       torch::serialize::InputArchive& in) {
  object.save(out);
  object.load(in);
};

template <class T>
concept Checkpointable = ArchiveSerializable<T> || std::is_trivially_copyable_v<T>;

struct CustomObject {
  std::function<std::string()> save;
  // Throws on bytes that cannot be this object's; returns the step that loads them.
  std::function<std::function<void()>(const std::string& bytes, const std::string& where)> stage;
};

template <Checkpointable T>
CustomObject custom_object(T& object) {
  if constexpr (ArchiveSerializable<T>) {
    return {[&object] {
              torch::serialize::OutputArchive archive;
              object.save(archive);
              std::ostringstream out;
              archive.save_to(out);
              return std::move(out).str();
            },
            [&object](const std::string& bytes, const std::string& where) {
              auto archive = std::make_shared<torch::serialize::InputArchive>();
              try {
                std::istringstream in(bytes);
                archive->load_from(in);
              } catch (const std::exception& e) {
                accel::detail::fail("{}: not a torch::serialize archive ({})", where, e.what());
              }
              return std::function<void()>([&object, archive] { object.load(*archive); });
            }};
  } else {
    return {[&object] {
              return std::string(reinterpret_cast<const char*>(&object), sizeof(T));
            },
            [&object](const std::string& bytes, const std::string& where) {
              if (bytes.size() != sizeof(T))
                accel::detail::fail("{}: {} bytes, but the registered object is {} bytes; was it "
                                    "saved from another type, or were objects registered in "
                                    "another order?",
                                    where, bytes.size(), sizeof(T));
              return std::function<void()>(
                  [&object, bytes] { std::memcpy(static_cast<void*>(&object), bytes.data(), sizeof(T)); });
            }};
  }
}

}  // namespace accel::state
