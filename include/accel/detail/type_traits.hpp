// is_specialization_of<T, Template>: whether T is Template<Args...> for some type arguments.
// One trait instead of one hand-written pair per template.
#pragma once

namespace accel::detail {

template <class T, template <class...> class Template>
inline constexpr bool is_specialization_of = false;
template <template <class...> class Template, class... Args>
inline constexpr bool is_specialization_of<Template<Args...>, Template> = true;

}  // namespace accel::detail
