// The owner of the precompiled header of einshard's own programs (CMakeLists.txt,
// einshard_program_pch): an object library needs a source, and the programs reuse the header it
// builds.
