#pragma once
/// @file
/// The exception types of einshard. Torch-free, so the notation layer can use them.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace einshard {

/// Base of every einshard error. The message names the operation, says what was expected and what
/// was found; a distributed failure carries the same message on every rank involved.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A malformed notation given as a run-time string. `what()` quotes the expression with a caret under
/// the fault; `message()` and `column()` (1-based) give the parts. An `Error` like every other
/// einshard error (one hierarchy: `catch (const es::Error&)` sees them all); it plays the part of
/// Python's `ValueError`, which an `std::invalid_argument` would, but a class cannot be both
/// without two `std::exception` bases (and then `catch (const std::exception&)` would miss it).
class NotationError : public Error {
 public:
  NotationError(std::string_view expression, std::size_t column, std::string message)
      : Error(format(expression, column, message)),
        expression_(expression),
        message_(std::move(message)),
        column_(column) {}

  [[nodiscard]] const std::string& expression() const noexcept { return expression_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] std::size_t column() const noexcept { return column_; }

 private:
  static std::string format(std::string_view expression, std::size_t column,
                            const std::string& message) {
    // what() is a C string: a NUL (or another control character) in a user-built notation would
    // cut the message short or garble the terminal, so the message shows it escaped and the quoted
    // expression as one '?', keeping the caret under its column.
    auto printable = [](char c) { return c == '\t' || (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f); };
    std::string out = "invalid einshard notation: ";
    for (char c : message) {
      if (printable(c)) {
        out += c;
      } else {
        constexpr char hex[] = "0123456789abcdef";
        const auto u = static_cast<unsigned char>(c);
        out += {'\\', 'x', hex[u >> 4], hex[u & 15]};
      }
    }
    out += " (column " + std::to_string(column) + ")\n  ";
    for (char c : expression) out += printable(c) ? c : '?';
    out += "\n  ";
    // Keep tabs as tabs so the caret lines up under any whitespace the expression uses.
    for (std::size_t i = 0; i + 1 < column && i < expression.size(); ++i)
      out += expression[i] == '\t' ? '\t' : ' ';
    out += '^';
    return out;
  }

  std::string expression_;
  std::string message_;
  std::size_t column_;
};

}  // namespace einshard
