#pragma once
/// @file
/// A string usable as a class-type template argument (`einshard<"a b -> b a">`), as in CTRE.

#include <cstddef>
#include <string_view>

namespace einshard {

/// A compile-time string of `N` characters (plus a terminating NUL). Structural, so it can be a
/// non-type template parameter; CTAD deduces `N` from a string literal.
template <std::size_t N>
struct fixed_string {
  char data[N + 1]{};

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&text)[N + 1]) noexcept {  // NOLINT: implicit on purpose
    for (std::size_t i = 0; i < N; ++i) data[i] = text[i];
  }
  [[nodiscard]] static constexpr std::size_t size() noexcept { return N; }
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {data, N}; }
  constexpr operator std::string_view() const noexcept { return view(); }  // NOLINT
};

template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

}  // namespace einshard
