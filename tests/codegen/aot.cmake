# The AOT path (kiln compile, the .so, its header, kiln run) — included by CMakeLists.txt here.
# aot_differential: every example and tests/passes/models through kiln compile and dlopen,
# against the reference executor; aot_cli.sh: headers, exports, dependencies, --emit kinds.
add_executable(codegen_aot_differential aot_differential.c)
target_link_libraries(codegen_aot_differential kiln_test_support kiln_codegen kiln_exec kiln_passes kiln_frontend kiln_runtime ${CMAKE_DL_LIBS})
target_compile_options(codegen_aot_differential PRIVATE ${KILN_WARNINGS})
add_dependencies(codegen_aot_differential kiln)
add_test(NAME codegen.aot_differential COMMAND codegen_aot_differential $<TARGET_FILE:kiln> ${PROJECT_SOURCE_DIR})
add_test(NAME codegen.aot_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/aot_cli.sh $<TARGET_FILE:kiln> ${PROJECT_SOURCE_DIR})
set_tests_properties(codegen.aot_differential codegen.aot_cli PROPERTIES LABELS codegen TIMEOUT 600)
if(KILN_SANITIZE)
  set_tests_properties(codegen.aot_cli PROPERTIES ENVIRONMENT "KILN_SANITIZER_LIBS=^(libasan|libubsan)")
endif()
# kiln compile --jobs 3 under memcheck and in a loop (issue 28's crash); the TSan build runs
# the loop with the part threads instrumented.
add_test(NAME codegen.parallel_compile COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/parallel_compile.sh $<TARGET_FILE:kiln> ${PROJECT_SOURCE_DIR})
set_tests_properties(codegen.parallel_compile PROPERTIES LABELS "codegen;tsan" TIMEOUT 600)
# Bounded dims through kiln compile, the header, kiln run, kiln train and the CUDA target's refusal.
add_test(NAME codegen.bounded_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bounded_cli.sh $<TARGET_FILE:kiln> ${PROJECT_SOURCE_DIR})
set_tests_properties(codegen.bounded_cli PROPERTIES LABELS codegen TIMEOUT 300)
