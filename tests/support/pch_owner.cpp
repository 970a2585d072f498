// The owner of the test suites' precompiled header (tests/CMakeLists.txt, einshard_test_pch): an
// object library needs a source, and the suites reuse the header it builds.
