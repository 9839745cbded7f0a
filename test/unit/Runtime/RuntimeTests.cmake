# The runtime over the fake driver (included from test/unit/Runtime/CMakeLists.txt).
if(NOT TARGET tally-runtime)
  return()
endif()
add_library(fakecuda SHARED FakeDriver.cpp)
target_include_directories(fakecuda SYSTEM PRIVATE ${TALLY_RT_CUDA_INCLUDE})
# Its own references to its entry points must not be interposed by
# libtally.so's (the fake is "the real driver" behind it).
target_link_options(fakecuda PRIVATE -Wl,-Bsymbolic)
set_target_properties(fakecuda PROPERTIES CXX_VISIBILITY_PRESET hidden)

add_executable(RuntimeTests RuntimeTest.cpp)
target_include_directories(RuntimeTests SYSTEM PRIVATE ${TALLY_RT_CUDA_INCLUDE})
target_link_libraries(RuntimeTests PRIVATE fakecuda GTest::gtest_main ${CMAKE_DL_LIBS})
add_dependencies(RuntimeTests tally-runtime)

set(_rt_env "LD_PRELOAD=$<TARGET_FILE:tally-runtime>" "TALLY_DRIVER=$<TARGET_FILE:fakecuda>")
if(TALLY_SANITIZE)
  # The sanitizer runtime lives in the executable; the preloaded library
  # resolves its symbols there.
  list(APPEND _rt_env "ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0")
endif()
add_test(NAME runtime-passthrough COMMAND RuntimeTests --gtest_filter=Passthrough.*)
set_tests_properties(runtime-passthrough PROPERTIES ENVIRONMENT "${_rt_env}")
set(_stats ${CMAKE_CURRENT_BINARY_DIR}/runtime-ptb-stats.json)
add_test(NAME runtime-force-ptb COMMAND RuntimeTests --gtest_filter=ForcePtb.*)
set_tests_properties(runtime-force-ptb PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_PREEMPT=random:6;TALLY_STATS=${_stats}"
  FIXTURES_SETUP runtime-ptb-stats)
add_test(NAME runtime-force-ptb-stats
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-stats.py ${_stats})
set_tests_properties(runtime-force-ptb-stats PROPERTIES FIXTURES_REQUIRED runtime-ptb-stats)
add_test(NAME runtime-force-slice COMMAND RuntimeTests --gtest_filter=ForceSlice.*)
set_tests_properties(runtime-force-slice PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=slice;TALLY_SLICE_BLOCKS=3")
add_test(NAME runtime-ptb-workers COMMAND RuntimeTests --gtest_filter=PtbWorkers.*)
set_tests_properties(runtime-ptb-workers PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_PTB_WORKERS_PER_SM=1")
add_test(NAME runtime-context-gone-at-exit COMMAND RuntimeTests --gtest_filter=ContextGoneAtExit.*)
set_tests_properties(runtime-context-gone-at-exit PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_STATS=1"
  FAIL_REGULAR_EXPRESSION "DEAD|FAILED")
add_test(NAME runtime-bad-setting COMMAND RuntimeTests --gtest_filter=BadSetting.*)
set_tests_properties(runtime-bad-setting PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=fastest"
  PASS_REGULAR_EXPRESSION "bad value .fastest. for TALLY_FORCE"
  FAIL_REGULAR_EXPRESSION "FAILED")
