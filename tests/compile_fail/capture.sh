#!/bin/sh
# The compiler launcher of the compile-fail cases: runs the compile command ("$@"), writes its
# output to $1.log and its exit status to $1.status, and exits 0, so that one build
# (compile_fail.build) compiles every case in parallel and goes on past the ones that fail, as
# they must. Each compile_fail.<case> test then judges its own log (run-case.cmake).
log=$1
shift
"$@" >"$log.log" 2>&1
echo $? >"$log.status"
exit 0
