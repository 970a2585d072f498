# ctest tests of einshard-explain (label tools): each runs the installed-to-be program and checks
# its exit status and output with check.cmake. Expected numbers are derived by hand in comments
# from the cost model's formulas (plan/cost.hpp), so a change in the planner's choice or costs shows.
#
# einshard_explain_test(<name> RC <status> [MATCH <regex>...] [NOMATCH <regex>...] ARGS <arg>...)
function(einshard_explain_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "RC" "MATCH;NOMATCH;ARGS")
  string(REPLACE ";" "@@" match "${arg_MATCH}")
  string(REPLACE ";" "@@" nomatch "${arg_NOMATCH}")
  add_test(NAME tools.explain.${name}
           COMMAND "${CMAKE_COMMAND}" "-DEXE=$<TARGET_FILE:einshard-explain>" "-DRC=${arg_RC}"
                   "-DMATCH=${match}" "-DNOMATCH=${nomatch}"
                   -P "${CMAKE_CURRENT_SOURCE_DIR}/einshard-explain/check.cmake" ${arg_ARGS})
  set_tests_properties(tools.explain.${name} PROPERTIES LABELS tools TIMEOUT 60)
endfunction()

# Column-parallel linear layer on dp=2,tp=4: x (b n c) is whole on tp, so it becomes partial over tp
# (Megatron's f: identity forward, all-reduce backward); the einsum leaves b n h/tp. x holds
# 8*128*1024*4 = 4194304 B per rank; its backward all-reduce over tp=4 moves 2*(3/4)*4194304 =
# 6291456 B. The output shard is 8*128*(4096/4)*4 = 4194304 B.
einshard_explain_test(column_parallel RC 0
  MATCH "mesh: dp=2, tp=4 \\(8 ranks\\)"
        "sizes: b=8 c=1024 h=4096 n=128"
        "input 1 +identity_forward_allreduce_backward \\[tp\\]"
        "b n c  ->  b n c // tp"
        "forward 0 B, 0 collective\\(s\\); backward 6291456 B \\(6 MiB\\), 1 collective\\(s\\)"
        "rank_local_einsum"
        "output 4194304 B \\(4 MiB\\)"
        "total per rank: forward 0 B in 0 collective\\(s\\); backward 6291456 B"
        "alternatives \\([0-9]+, cheapest under training first"
        "training +inference +memory +communication +latency"
  ARGS "b n c, h/tp c -> b n h/tp" --mesh dp=2,tp=4 --shape b=8,n=128,c=1024,h=4096)

# Row-parallel: the contracted c is sharded on both inputs, the result is summed over tp by an
# all-reduce of the (b n h) output: 8*128*4096*8 B (float64) = 33554432 B, moved 2*(3/4) of it.
einshard_explain_test(row_parallel RC 0
  MATCH "allreduce_forward_identity_backward \\[tp\\]"
        "forward 50331648 B \\(48 MiB\\), 1 collective\\(s\\); backward 0 B"
        "dtype: float64 \\(8 bytes\\)"
  ARGS "b n c/tp, h c/tp -> b n h" --mesh tp=4 --shape b=8,n=128,c=1024,h=4096 --dtype float64)

# A split needs no communication forward and gathers backward: (a/sp) of 64*32*4 B over sp=4
# all-gathers (3/4)*8192 = 6144 B.
einshard_explain_test(unary_split RC 0
  MATCH "split_forward_allgather_backward \\[sp, a\\]"
        "a b  ->  a/sp b"
        "backward 6144 B \\(6 KiB\\), 1 collective"
        "alternatives: none"
  ARGS "a b -> a/sp b" --mesh sp=4 --shape a=64,b=32)

# A repartition between mesh dimensions is one all-to-all.
einshard_explain_test(unary_alltoall RC 0
  MATCH "alltoall_repartition" "a/dp b  ->  a b/dp"
  ARGS "a/dp b -> a b/dp" --mesh dp=2 --shape a=8,b=8)

# Sizes assumed when none are given; families expand; a local notation moves nothing.
einshard_explain_test(assumed_sizes RC 0
  MATCH "sizes: a=1024 b=1024  \\(assumed" ARGS "a b -> a/tp b" --mesh tp=2)
einshard_explain_test(family RC 0
  MATCH "expanded: b h w -> b h/sp w" ARGS "b *spatial -> b h/sp w" --mesh sp=2 --family spatial=h,w)
einshard_explain_test(local RC 0
  MATCH "rank-local einsum on every rank's shards; no communication" NOMATCH "every rank runs"
  ARGS "a/dp b -> b a/dp" --mesh dp=2 --shape a=4,b=4)
einshard_explain_test(memory_policy RC 0
  MATCH "policy: memory" ARGS "b n c, h/tp c -> b n h/tp" --mesh tp=4 --policy memory)

# --json: the same plan as one object (the column-parallel numbers again).
einshard_explain_test(json RC 0
  MATCH "^\\{\"notation\":\"b n c, h/tp c -> b n h/tp\""
        "\"name\":\"identity_forward_allreduce_backward\",\"group\":\"tp\""
        "\"total\":\\{\"forward_bytes\":0,\"backward_bytes\":6291456"
        "\"chosen_by\":\\[\"training\",\"inference\",\"memory\",\"communication\",\"latency\"\\]"
  ARGS "b n c, h/tp c -> b n h/tp" --mesh dp=2,tp=4 --shape b=8,n=128,c=1024,h=4096 --json)

# Errors: the notation's caret line (exit 2), the planner's message (exit 1), the command line (64).
einshard_explain_test(caret RC 2
  MATCH "invalid einshard notation" "a b -> a/sp b c" "\n  +\\^"
  ARGS "a b -> a/sp b c" --mesh sp=2)
einshard_explain_test(unknown_mesh_dim RC 1
  MATCH "mesh group 'tp': expected dimensions of the mesh \\(dp\\), found unknown mesh dimension 'tp'" ARGS "a b -> a/tp b" --mesh dp=2)
einshard_explain_test(missing_size RC 1
  MATCH "no size for axis b of 'a b -> a/dp b'" ARGS "a b -> a/dp b" --mesh dp=2 --shape a=4)
einshard_explain_test(three_operands RC 1
  MATCH "has 3 inputs" ARGS "a b, b c, c d -> a/dp d" --mesh dp=2)
einshard_explain_test(no_mesh RC 64 MATCH "--mesh is required" ARGS "a b -> a/dp b")
einshard_explain_test(bad_mesh RC 64 MATCH "--mesh dp expects an integer >= 1, found 'x'"
  ARGS "a b -> a/dp b" --mesh dp=x)
einshard_explain_test(unknown_option RC 64 MATCH "unknown option '--frobnicate'"
  ARGS "a b -> a/dp b" --mesh dp=2 --frobnicate)
einshard_explain_test(help RC 0 MATCH "usage: einshard-explain NOTATION --mesh" ARGS --help)
