// Values as bytes for gather_object: trivially copyable types, std::string, and std::vector of
// trivially copyable types. Ranks run the same binary, so the layout is the same everywhere.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "dependent_false.hpp"
#include "error.hpp"

namespace accel::detail {

template <class T>
inline constexpr bool is_byte_vector = false;
template <class T, class A>
inline constexpr bool is_byte_vector<std::vector<T, A>> = std::is_trivially_copyable_v<T>;

template <class T>
std::string to_bytes(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else if constexpr (is_byte_vector<T>) {
    return std::string(reinterpret_cast<const char*>(value.data()),
                       value.size() * sizeof(typename T::value_type));
  } else if constexpr (std::is_trivially_copyable_v<T>) {
    return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
  } else {
    static_assert(dependent_false<T>,
                  "accel: gather_object takes a trivially copyable type, std::string or a "
                  "std::vector of a trivially copyable type; serialize other values to a "
                  "std::string first");
    return {};
  }
}

template <class T>
T from_bytes(const std::string& bytes) {
  if constexpr (std::is_same_v<T, std::string>) {
    return bytes;
  } else if constexpr (is_byte_vector<T>) {
    T value(bytes.size() / sizeof(typename T::value_type));
    std::memcpy(value.data(), bytes.data(), bytes.size());
    return value;
  } else if constexpr (!std::is_trivially_copyable_v<T>) {
    // to_bytes<T>, instantiated with this, has already failed the build and said why; a memcpy
    // here would only add errors (-Wclass-memaccess) that hide it.
    fail("gather_object cannot carry this type");
  } else {
    if (bytes.size() != sizeof(T))
      fail("gather_object: received {} bytes for a value of {} bytes; every rank must pass the "
           "same type",
           bytes.size(), sizeof(T));
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
  }
}

}  // namespace accel::detail
