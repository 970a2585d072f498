# Notations that must not compile, each with the diagnostic it must produce. GCC renders the message
# inside the template argument of `notation_error<...>`, escaping quotes as \' — Q matches either.
set(Q "\\\\?'")

function(bad_notation name notation expect)
  einshard_expect_compile_error(NAME ${name}
    CODE "static_assert(es::check<\"${notation}\">());"
    EXPECT "notation_error<.*${expect}")
endfunction()

bad_notation(missing_arrow        "a b c"                "expected ${Q}->${Q} at column 6")
bad_notation(missing_output       "a b ->"               "expected an output specification after ${Q}->${Q} at column 7")
bad_notation(missing_axis         "-> a"                 "expected an axis name at column 1")
bad_notation(unbalanced_open      "(a b -> a"            "unbalanced ${Q}\\(${Q} at column 1")
bad_notation(unbalanced_close     "a b) -> a"            "unbalanced ${Q}\\)${Q} at column 4")
bad_notation(nested_group         "a (b (c)) -> a"       "nested groups are not allowed at column 6")
bad_notation(ellipsis_in_group    "(a ...) -> a"         "${Q}\\.\\.\\.${Q} is not allowed inside a group at column 4")
bad_notation(empty_group          "a () -> a"            "empty group ${Q}\\(\\)${Q} at column 3")
bad_notation(two_ellipses         "... a ... -> a"       "more than one ${Q}\\.\\.\\.${Q} in one operand at column 7")
bad_notation(output_annotation    "a -> a [param]"       "annotations are only allowed on input operands at column 8")
bad_notation(duplicate_annotation "a [param, param] -> a" "duplicate tensor annotation ${Q}param${Q} at column 11")
bad_notation(unknown_annotation   "a [async] -> a"       "unknown annotation item ${Q}async${Q}")
bad_notation(grad_suffix_group    "a [grad=async:ddp] -> a" "grad annotation suffix requires an explicit mesh group")
bad_notation(grad_suffix_unknown  "a [grad=dp:bogus] -> a" "unknown grad annotation suffix ${Q}bogus${Q} at column 12")
bad_notation(init_sync_suffix     "a [init_sync=tp:async] -> a" "init_sync annotations do not accept suffixes")
bad_notation(unknown_output_axis  "a b -> a d"           "output axis ${Q}d${Q} does not appear in any input at column 10")
bad_notation(repeated_output_axis "a b -> a b a"         "output axis ${Q}a${Q} appears more than once at column 12")
bad_notation(output_ellipsis      "a b -> ... a"         "the output has ${Q}\\.\\.\\.${Q} but no input does at column 8")
bad_notation(empty_mesh_component "a/dp- b -> a"         "empty component in compound mesh name ${Q}dp-${Q} at column 6")
bad_notation(repeated_mesh_component "a/dp-dp b -> a"    "repeated component ${Q}dp${Q} in compound mesh name at column 6")
bad_notation(hyphen_in_axis       "a-b -> a"             "axis names cannot contain ${Q}-${Q} at column 2")
bad_notation(missing_mesh         "a/ -> a"             "expected a mesh dimension name after ${Q}/${Q} at column 4")
bad_notation(repeated_partial     "a // (sp, sp) -> a"   "repeated partial mesh dimension ${Q}sp${Q} at column 11")
bad_notation(shard_and_partial    "a/tp b // tp -> a b"  "mesh dimension ${Q}tp${Q} both shards an axis and is a partial")
bad_notation(two_shardings        "a/dp a/sp -> a/dp"    "axis ${Q}a${Q} appears with two different shardings in one operand at column 6")
bad_notation(family_at_compile_time "b *spatial -> b"    "family reference ${Q}\\*spatial${Q} needs the run-time form")
bad_notation(trailing_input       "a -> a, b"            "unexpected ${Q},${Q} after the output specification at column 7")

# The full API reports the same diagnostic, and checks the number of tensors against the notation.
einshard_expect_compile_error(NAME einshard_missing_arrow TORCH HEADER einshard/einshard.hpp
  CODE [=[at::Tensor x; (void)es::einshard<"a b c">(x);]=]
  EXPECT "notation_error<.*expected ${Q}->${Q} at column 6")
einshard_expect_compile_error(NAME einshard_arity TORCH HEADER einshard/einshard.hpp
  CODE [=[at::Tensor x; (void)es::einshard<"a b, b c -> a c">(x);]=]
  EXPECT "expected as many tensors as the notation has inputs")
