// Regression tests of what the fuzzers (tests/fuzz) and the sanitizer runs found, one test case
// per finding, named after it. The fuzzers' seed corpus keeps the crashing input too
// (tests/fuzz/corpus/<target>/regress-*).

#include <ATen/ATen.h>

#include <einshard/einshard.hpp>

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <string>
#include <string_view>

namespace test_fuzz_regressions {

namespace es = einshard;

TEST_CASE("fuzz: a NUL in a run-time notation keeps the whole message and the caret",
          "[fuzz][errors]") {
  // fuzz_notation: what() is a C string, and a NUL in the quoted expression (or in the message's
  // "unexpected character '\0'") cut it short before the caret.
  const std::string notation("b (h p) c -p\0 c -> b h p", 24);
  // The run-time front end of es::einshard (parse, then the error the user sees); calling it
  // directly keeps this file from instantiating the operations (a minute of ASan build).
  try {
    (void)es::detail::compile_runtime(notation, notation);
    FAIL("expected a NotationError");
  } catch (const es::NotationError& e) {
    const std::string what = e.what();  // up to the first NUL, as every caller reads it
    INFO(what);
    CHECK(what.find('^') != std::string::npos);
    CHECK(what.find('\0') == std::string::npos);
    CHECK(what.find("(column " + std::to_string(e.column()) + ")") != std::string::npos);
    CHECK(e.expression() == notation);  // the parts stay exact
  }

  const es::NotationError e(std::string_view("a\0b -> a", 8), 2, std::string("unexpected character '\0'", 24));
  const std::string what = e.what();
  CHECK(what == "invalid einshard notation: unexpected character '\\x00' (column 2)\n  a?b -> a\n   ^");
}

}  // namespace test_fuzz_regressions
