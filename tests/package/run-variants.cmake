# accel_add_variants() and accel::Variants through an installed accel (find_package): runs the
# variants package.find_package built into WORK_DIR (run-consumer.cmake, its fixture), asks for
# variants that are and are not compiled in, and checks that a bad variant stops the
# configuration. Invoked by ctest with -P, with SOURCE_DIR, WORK_DIR and GENERATOR.
unset(ENV{ACCEL_VARIANT})
set(built "${WORK_DIR}/build/variants")

# expect(<status> <regex> <program> [args...]): the program exits with status and its output
# (stdout and stderr) matches regex.
function(expect status regex program)
  execute_process(COMMAND "${built}/${program}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${status}" OR NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "${program} ${ARGN}: exit ${rc}, output:\n${out}${err}\n"
                        "expected exit ${status} and: ${regex}")
  endif()
  message(STATUS "${program} ${ARGN}: ${out}${err}")
endfunction()

expect(0 "variant Ddp,Fp32,1 of 1 trained, accel " train_ddp_fp32_1)
expect(0 "variant Ddp,Fp32,2 of 1 trained" train_ddp_fp32_2)
expect(0 "variant Ddp,Fp32,1 of 2 trained" train_any)
expect(0 "variant Ddp,Fp32,2 of 2 trained" train_any --variant ddp,fp32,2)
set(ENV{ACCEL_VARIANT} "Ddp,Fp32,2")
expect(0 "variant Ddp,Fp32,2 of 2 trained" train_any)
unset(ENV{ACCEL_VARIANT})
expect(2 "accel: variant 'Zero3,Bf16,4' is not compiled into this program. it has Ddp,Fp32,1 \\| Ddp,Fp32,2"
       train_any --variant Zero3,Bf16,4)
expect(2 "accel: variant 'Ddp,Fp32,2' is not compiled into this program. it has Ddp,Fp32,1\\."
       train_ddp_fp32_1 --variant=Ddp,Fp32,2)

file(REMOVE_RECURSE "${WORK_DIR}/bad")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package/consumer" -B "${WORK_DIR}/bad"
          -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DACCEL_CONSUMER_VARIANTS=ON
          "-DACCEL_BAD_VARIANT=Ddp,Bf17,1"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc OR NOT err MATCHES "accel: accel_add_variants\\(bad\\): variant 'Ddp,Bf17,1' has precision 'Bf17'")
  message(FATAL_ERROR "a bad variant: exit ${rc}, output:\n${out}${err}")
endif()
message(STATUS "variants consumer ok")
