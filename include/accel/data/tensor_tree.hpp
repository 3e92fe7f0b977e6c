// Walking user data made of tensors: aggregates (through Boost.PFR, no registration needed),
// std::vector, std::array, std::tuple, std::pair, std::optional, nested to any depth.
// map_tensors rebuilds a value with every tensor transformed (to_device, casts); collate turns a
// list of samples into one batch of the same type, each tensor stacked along a new first dim.
#pragma once

#include <boost/pfr.hpp>
#include <torch/torch.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/dependent_false.hpp"
#include "../detail/error.hpp"
#include "../detail/shape_text.hpp"
#include "../detail/type_traits.hpp"

namespace accel::data {

namespace detail {
template <class T>
inline constexpr bool is_vector = accel::detail::is_specialization_of<T, std::vector>;

template <class T>
inline constexpr bool is_array = false;  // std::array has a non-type parameter
template <class T, std::size_t N>
inline constexpr bool is_array<std::array<T, N>> = true;

template <class T>
inline constexpr bool is_optional = accel::detail::is_specialization_of<T, std::optional>;

template <class T>
inline constexpr bool is_tuple_like =
    accel::detail::is_specialization_of<T, std::tuple> ||
    accel::detail::is_specialization_of<T, std::pair>;

// Values carried through map_tensors unchanged: they hold no tensor.
template <class T>
inline constexpr bool is_passive = std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                                   std::is_same_v<T, std::string> || std::is_empty_v<T>;

template <class T>
inline constexpr bool is_user_aggregate = std::is_class_v<T> && std::is_aggregate_v<T> &&
                                          !is_array<T> && !std::is_empty_v<T>;
}  // namespace detail

// A copy of `value` with f applied to every defined tensor inside it.
template <class T, class F>
T map_tensors(const T& value, F&& f) {
  if constexpr (std::is_same_v<T, torch::Tensor>) {
    return value.defined() ? f(value) : value;
  } else if constexpr (detail::is_vector<T> || detail::is_array<T>) {
    T out = value;
    for (auto& element : out) element = map_tensors(element, f);
    return out;
  } else if constexpr (detail::is_optional<T>) {
    return value ? T(map_tensors(*value, f)) : T();
  } else if constexpr (detail::is_tuple_like<T>) {
    return std::apply([&](const auto&... elements) { return T(map_tensors(elements, f)...); },
                      value);
  } else if constexpr (detail::is_passive<T>) {
    return value;
  } else if constexpr (detail::is_user_aggregate<T>) {
    T out = value;
    boost::pfr::for_each_field(out, [&](auto& field) { field = map_tensors(field, f); });
    return out;
  } else {
    static_assert(accel::detail::dependent_false<T>,
                  "accel: cannot walk this type for tensors; use torch::Tensor, aggregates "
                  "(structs without constructors), std::vector, std::array, std::tuple, "
                  "std::pair, std::optional of them, or numbers and std::string");
    return value;
  }
}

namespace detail {
// Whether map_tensors accepts T (it stops the build on any other type), so that code which
// would walk a value only on request can ask first instead of breaking every other build.
template <class T>
consteval bool walkable() {
  if constexpr (std::is_same_v<T, torch::Tensor> || is_passive<T>) {
    return true;
  } else if constexpr (is_vector<T> || is_array<T> || is_optional<T>) {
    return walkable<typename T::value_type>();
  } else if constexpr (is_tuple_like<T>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (walkable<std::remove_cvref_t<std::tuple_element_t<I, T>>>() && ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (is_user_aggregate<T>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (walkable<std::remove_cvref_t<boost::pfr::tuple_element_t<I, T>>>() && ...);
    }(std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
  } else {
    return false;
  }
}
}  // namespace detail

// Calls f on every defined tensor inside value, in declaration order.
template <class T, class F>
void for_each_tensor(const T& value, F&& f) {
  (void)map_tensors(value, [&](const torch::Tensor& t) {
    f(t);
    return t;
  });
}

// `value` with every tensor moved to `device` (a no-op for tensors already there).
template <class T>
T to_device(const T& value, const torch::Device& device, bool non_blocking = false) {
  return map_tensors(value, [&](const torch::Tensor& t) { return t.to(device, non_blocking); });
}

// One batch from a list of samples of the same type: tensors stacked along a new dimension 0,
// containers collated position by position (their lengths must agree across samples). `path`
// names the field in errors: `sample.<1>[0]` is element 0 of the sample's second field.
template <class T>
T collate(std::span<const T> samples, const std::string& path = "sample") {
  if (samples.empty()) accel::detail::fail("collate needs at least one sample, got none");
  const T& first = samples.front();
  if constexpr (std::is_same_v<T, torch::Tensor>) {
    for (std::size_t i = 1; i < samples.size(); ++i)
      if (samples[i].sizes() != first.sizes() || samples[i].scalar_type() != first.scalar_type())
        accel::detail::fail(
            "collate: field {} is a {} tensor of shape [{}] in the batch's first sample and a {} "
            "tensor of shape [{}] in its sample {}; make the samples agree (pad, resize or "
            "cast them) or pass your own collate function to the DataLoader",
            path, c10::toString(first.scalar_type()), accel::detail::shape_text(first.sizes()),
            c10::toString(samples[i].scalar_type()), accel::detail::shape_text(samples[i].sizes()), i);
    return torch::stack(std::vector<torch::Tensor>(samples.begin(), samples.end()));
  } else if constexpr (detail::is_vector<T> || detail::is_array<T>) {
    T out = first;
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::vector<std::remove_cvref_t<decltype(out[i])>> column;
      column.reserve(samples.size());
      for (const T& sample : samples) {
        if (sample.size() != first.size())
          accel::detail::fail(
              "collate: field {} has {} elements in the first sample and {} in "
              "another; pad the samples to one length or pass your own collate function",
              path, first.size(), sample.size());
        column.push_back(sample[i]);
      }
      out[i] = collate(std::span<const typename decltype(column)::value_type>(column),
                       fmt::format("{}[{}]", path, i));
    }
    return out;
  } else if constexpr (detail::is_optional<T>) {
    std::size_t present = 0;
    for (const T& sample : samples) present += sample.has_value();
    if (present == 0) return T();
    if (present != samples.size())
      accel::detail::fail(
          "collate: the std::optional field {} is set in {} of {} samples; it must be set in "
          "all samples of a batch or in none",
          path, present, samples.size());
    std::vector<typename T::value_type> column;
    column.reserve(samples.size());
    for (const T& sample : samples) column.push_back(*sample);
    return T(collate(std::span<const typename T::value_type>(column), path));
  } else if constexpr (detail::is_tuple_like<T> || detail::is_user_aggregate<T>) {
    T out = first;
    auto collate_field = [&](auto& field, auto index) {
      using Field = std::remove_cvref_t<decltype(field)>;
      std::vector<Field> column;
      column.reserve(samples.size());
      for (const T& sample : samples) {
        if constexpr (detail::is_tuple_like<T>)
          column.push_back(std::get<decltype(index)::value>(sample));
        else
          column.push_back(boost::pfr::get<decltype(index)::value>(sample));
      }
      field = collate(std::span<const Field>(column),
                      fmt::format("{}.<{}>", path, decltype(index)::value));
    };
    if constexpr (detail::is_tuple_like<T>) {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (collate_field(std::get<I>(out), std::integral_constant<std::size_t, I>{}), ...);
      }(std::make_index_sequence<std::tuple_size_v<T>>{});
    } else {
      boost::pfr::for_each_field(out, collate_field);
    }
    return out;
  } else {
    static_assert(accel::detail::dependent_false<T>,
                  "accel: cannot collate this sample field; batch fields must be torch::Tensor "
                  "(store numbers as torch::tensor(value)), nested aggregates, std::vector, "
                  "std::array, std::tuple, std::pair or std::optional of them, or pass your own "
                  "collate function to the DataLoader");
    return first;
  }
}

}  // namespace accel::data
