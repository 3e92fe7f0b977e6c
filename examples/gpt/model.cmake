# The gpt example's model (model.hpp, model.cpp) as a static library, accel_gpt_model: one
# definition of the model, compiled once, for the example and for accel_bench --model gpt. Both
# folders include this file, and the first to do so defines the target, so the benchmark still
# finds the model when the examples are switched off (ACCEL_BUILD_EXAMPLES=OFF).
# #include "gpt/model.hpp".
include_guard(GLOBAL)
add_library(accel_gpt_model STATIC ${CMAKE_CURRENT_LIST_DIR}/model.cpp)
target_link_libraries(accel_gpt_model PUBLIC ${accel_library})
target_include_directories(accel_gpt_model PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
accel_strict_warnings(accel_gpt_model)
