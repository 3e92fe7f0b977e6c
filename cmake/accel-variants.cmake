# accel_add_variants(<name> SOURCES <source>... VARIANTS <variant>... [ONE_EXECUTABLE])
#
# Builds <source>s once per variant, a variant being "Parallelism,Precision,Accumulation" as in
#   accel_add_variants(train SOURCES train.cpp VARIANTS "Ddp,Bf16,1" "Zero2,Bf16,4")
# which makes the executables train_ddp_bf16_1 and train_zero2_bf16_4. Each is compiled with
#   ACCEL_VARIANT   its alias, e.g. accel::Accelerator<accel::Ddp, accel::Bf16, accel::GradAccum<1>>
#   ACCEL_VARIANTS  the same (the list of aliases the executable carries)
# With ONE_EXECUTABLE, one executable <name> carries every variant: ACCEL_VARIANTS is the list of
# aliases, for accel::Variants<ACCEL_VARIANTS> (include/accel/variants.hpp), which picks one at
# run time. A source written with accel::Variants<ACCEL_VARIANTS> builds either way.
#
# Parallelism: Ddp, Zero2, Zero3, Fsdp<FullShard|ShardGradOp|NoShard|HybridShard>;
# precision: Fp32, Bf16, Fp16, Fp8; accumulation: a whole number from 1. A variant outside these
# stops the configuration with an accel: message naming it. Returns nothing; the targets link
# accel::accel and may be changed further like any other (the per-variant ones are listed in
# <name>_VARIANT_TARGETS in the caller's scope).
#
# Two or more per-variant executables share one precompiled header of <torch/torch.h> and
# <accel/accelerator.hpp>, made with the first variant and reused by the others (REUSE_FROM), so
# that torch and accel are parsed once rather than once per variant, and no TU is compiled for
# the header alone. g++ uses a precompiled header only where the compile has the macros and
# code-affecting flags it was made with, so the variants' macros are not the targets' definitions
# (which the header's compile gets too) but a property of the sources read per target
# (COMPILE_DEFINITIONS $<TARGET_PROPERTY:ACCEL_VARIANT_DEFINITIONS>): flags set on every variant
# target reach the header as well. NO_PRECOMPILED_HEADER leaves it out.
function(accel_add_variants name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "ONE_EXECUTABLE;NO_PRECOMPILED_HEADER" ""
                        "SOURCES;VARIANTS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "accel: accel_add_variants(${name}): unexpected arguments "
                        "'${arg_UNPARSED_ARGUMENTS}'; give SOURCES, VARIANTS, ONE_EXECUTABLE "
                        "and NO_PRECOMPILED_HEADER")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "accel: accel_add_variants(${name}) needs SOURCES, e.g. SOURCES train.cpp")
  endif()
  if(NOT arg_VARIANTS)
    message(FATAL_ERROR "accel: accel_add_variants(${name}) needs VARIANTS, e.g. "
                        "VARIANTS \"Ddp,Bf16,1\" \"Zero2,Bf16,4\"")
  endif()
  set(parallelisms Ddp Zero2 Zero3 Fsdp<FullShard> Fsdp<ShardGradOp> Fsdp<NoShard>
                   Fsdp<HybridShard>)
  set(precisions Fp32 Bf16 Fp16 Fp8)
  set(aliases "")
  set(targets "")
  foreach(variant IN LISTS arg_VARIANTS)
    string(REPLACE "," ";" parts "${variant}")
    list(LENGTH parts count)
    if(NOT count EQUAL 3)
      message(FATAL_ERROR "accel: accel_add_variants(${name}): variant '${variant}' is not "
                          "Parallelism,Precision,Accumulation; e.g. \"Ddp,Bf16,4\"")
    endif()
    list(GET parts 0 parallelism)
    list(GET parts 1 precision)
    list(GET parts 2 steps)
    string(STRIP "${parallelism}" parallelism)
    string(STRIP "${precision}" precision)
    string(STRIP "${steps}" steps)
    if(NOT parallelism IN_LIST parallelisms)
      string(REPLACE ";" ", " known "${parallelisms}")
      message(FATAL_ERROR "accel: accel_add_variants(${name}): variant '${variant}' has "
                          "parallelism '${parallelism}'; use one of ${known}")
    endif()
    if(NOT precision IN_LIST precisions)
      string(REPLACE ";" ", " known "${precisions}")
      message(FATAL_ERROR "accel: accel_add_variants(${name}): variant '${variant}' has "
                          "precision '${precision}'; use one of ${known}")
    endif()
    if(NOT steps MATCHES "^[1-9][0-9]*$")
      message(FATAL_ERROR "accel: accel_add_variants(${name}): variant '${variant}' has "
                          "accumulation '${steps}'; use a whole number from 1, e.g. 4")
    endif()
    string(REGEX REPLACE "([A-Za-z][A-Za-z0-9]*)" "accel::\\1" parallelism_type "${parallelism}")
    set(alias "accel::Accelerator<${parallelism_type}, accel::${precision}, accel::GradAccum<${steps}>>")
    if(alias IN_LIST aliases)
      message(FATAL_ERROR "accel: accel_add_variants(${name}): variant '${variant}' is given twice")
    endif()
    list(APPEND aliases "${alias}")
    if(NOT arg_ONE_EXECUTABLE)
      string(TOLOWER "${name}_${parallelism}_${precision}_${steps}" target)
      string(REGEX REPLACE "[^a-z0-9_]+" "_" target "${target}")
      string(REGEX REPLACE "_+" "_" target "${target}")
      string(REGEX REPLACE "_$" "" target "${target}")
      add_executable(${target} ${arg_SOURCES})
      target_link_libraries(${target} PRIVATE accel::accel)
      set_target_properties(${target} PROPERTIES
        ACCEL_VARIANT_DEFINITIONS "ACCEL_VARIANT=${alias};ACCEL_VARIANTS=${alias}")
      list(APPEND targets ${target})
    endif()
  endforeach()
  if(arg_ONE_EXECUTABLE)
    string(REPLACE ";" ", " all "${aliases}")
    add_executable(${name} ${arg_SOURCES})
    target_link_libraries(${name} PRIVATE accel::accel)
    set_target_properties(${name} PROPERTIES ACCEL_VARIANT_DEFINITIONS "ACCEL_VARIANTS=${all}")
    set(targets ${name})
  endif()
  # Empty for a target that does not set the property: the sources build elsewhere unchanged.
  set(definitions "$<TARGET_PROPERTY:ACCEL_VARIANT_DEFINITIONS>")
  foreach(source IN LISTS arg_SOURCES)
    get_property(present SOURCE "${source}" PROPERTY COMPILE_DEFINITIONS)
    if(NOT definitions IN_LIST present)
      set_property(SOURCE "${source}" APPEND PROPERTY COMPILE_DEFINITIONS "${definitions}")
    endif()
  endforeach()
  list(LENGTH targets count)
  if(count GREATER 1 AND NOT arg_NO_PRECOMPILED_HEADER)
    list(GET targets 0 owner)
    list(SUBLIST targets 1 -1 others)
    target_precompile_headers(${owner} PRIVATE <torch/torch.h> <accel/accelerator.hpp>)
    foreach(target IN LISTS others)
      target_precompile_headers(${target} REUSE_FROM ${owner})
    endforeach()
  endif()
  set(${name}_VARIANT_TARGETS ${targets} PARENT_SCOPE)
endfunction()
