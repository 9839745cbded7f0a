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

# What libtally adds to an HP process's requests on the host, against this
# fake (a benchmark: scripts/bench-hp-launch.sh; a smoke test below).
add_executable(tally-hp-launch-bench ${PROJECT_SOURCE_DIR}/benchmarks/runtime/hp-launch-bench.cpp)
target_include_directories(tally-hp-launch-bench SYSTEM PRIVATE ${TALLY_RT_CUDA_INCLUDE})
target_link_libraries(tally-hp-launch-bench PRIVATE fakecuda)
add_dependencies(tally-hp-launch-bench tally-runtime)

add_executable(RuntimeTests RuntimeTest.cpp)
target_include_directories(RuntimeTests SYSTEM PRIVATE ${TALLY_RT_CUDA_INCLUDE})
target_link_libraries(RuntimeTests PRIVATE fakecuda TallyRuntimeCore GTest::gtest_main
                      ${CMAKE_DL_LIBS} pthread)
add_dependencies(RuntimeTests tally-runtime tally-opt)

# Each test's own segment folder and profile cache (never the user's).
set(_rt_dir ${CMAKE_CURRENT_BINARY_DIR}/rt)
file(MAKE_DIRECTORY ${_rt_dir}/shm)
set(_rt_env "LD_PRELOAD=$<TARGET_FILE:tally-runtime>" "TALLY_DRIVER=$<TARGET_FILE:fakecuda>"
    "TALLY_SHM_DIR=${_rt_dir}/shm" "TALLY_CACHE_DIR=${_rt_dir}/cache"
    # Not an MPS client, whatever runs on the test machine (the beside
    # tests set it).
    "FAKE_MPS=0"
    # Free mode runs originals (the fake runs them at once; a PTB variant's
    # blocks wait for a sync, and a persisted profile would make which
    # launch measures what depend on earlier runs): the free-measure and
    # schedule-be tests turn measuring in Free mode on.
    "TALLY_FREE_MEASURE=0"
    # A launch of a shape being measured waits for HP to be idle, as the
    # tests of the other rules expect: the provisional tests turn narrow
    # PTB launches of such shapes beside HP on.
    "TALLY_PROVISIONAL=0")
if(TALLY_SANITIZE)
  # The sanitizer runtime lives in the executable; the preloaded library
  # resolves its symbols there.
  list(APPEND _rt_env "ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0")
endif()
# The benchmark runs (not timed: its numbers are for scripts/bench-hp-launch.sh).
add_test(NAME hp-launch-bench-smoke
  COMMAND tally-hp-launch-bench --requests 300 --batches 3)
set_tests_properties(hp-launch-bench-smoke PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-bench;TALLY_PRIORITY=high"
  PASS_REGULAR_EXPRESSION "3 batches of 300 requests: median [0-9.]+ ns per request"
  FAIL_REGULAR_EXPRESSION "DEAD|LOAD-UNDER-STOP|failed|error|Sanitizer")
add_test(NAME runtime-passthrough COMMAND RuntimeTests --gtest_filter=Passthrough.*)
set_tests_properties(runtime-passthrough PROPERTIES ENVIRONMENT "${_rt_env}")
# A RuntimeTests run that writes its statistics (NAME.json) under ENV, then
# CHECKER (a script here) on them: NAME, and NAME-check for the checker
# unless CHECK_NAME is given.
function(tally_stats_test NAME FILTER ENV CHECKER)
  set(_json ${CMAKE_CURRENT_BINARY_DIR}/${NAME}.json)
  set(_check ${NAME}-check)
  if(ARGC GREATER 4)
    set(_check ${ARGV4})
  endif()
  add_test(NAME ${NAME} COMMAND RuntimeTests --gtest_filter=${FILTER})
  set_tests_properties(${NAME} PROPERTIES ENVIRONMENT "${ENV};TALLY_STATS=${_json}"
    FIXTURES_SETUP ${NAME}-json FAIL_REGULAR_EXPRESSION "FAILED|LOAD-UNDER-STOP")
  add_test(NAME ${_check}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/${CHECKER} ${_json})
  set_tests_properties(${_check} PROPERTIES FIXTURES_REQUIRED ${NAME}-json)
endfunction()
tally_stats_test(runtime-force-ptb "ForcePtb.*"
  "${_rt_env};TALLY_FORCE=ptb;TALLY_PREEMPT=random:6" check-stats.py runtime-force-ptb-stats)
# Without timed statistics the preemptions are not timed on the GPU either
# (their events are made without times).
tally_stats_test(runtime-force-ptb-untimed "ForcePtb.*"
  "${_rt_env};TALLY_FORCE=ptb;TALLY_PREEMPT=random:6;TALLY_STATS_TIMING=0" check-stats.py)
# Control blocks cleared a slab at a time: PTB launches neither preempted
# nor scheduled (each retires as soon as it is seen ended), in a process of
# their own.
add_test(NAME runtime-ctrl-slabs COMMAND RuntimeTests --gtest_filter=CtrlSlabs.*)
set_tests_properties(runtime-ctrl-slabs PROPERTIES ENVIRONMENT
  "${_rt_env};TALLY_FORCE=ptb;TALLY_SCHEDULE=0")
add_test(NAME runtime-ctrl-slabs-broken COMMAND RuntimeTests --gtest_filter=CtrlSlabsBroken.*)
set_tests_properties(runtime-ctrl-slabs-broken PROPERTIES ENVIRONMENT
  "${_rt_env};TALLY_FORCE=ptb;TALLY_SCHEDULE=0")
# A slab's clear that fails to queue; a launch that fails after its own
# clear; the clears' stream or a slab's event that cannot be made.
foreach(_case MemsetFails LaunchFails StreamFails EventFails)
  string(TOLOWER ${_case} _lc)
  add_test(NAME runtime-ctrl-slabs-${_lc} COMMAND RuntimeTests --gtest_filter=CtrlSlabs${_case}.*)
  set_tests_properties(runtime-ctrl-slabs-${_lc} PROPERTIES ENVIRONMENT
    "${_rt_env};TALLY_FORCE=ptb;TALLY_SCHEDULE=0")
endforeach()
# A context whose internal streams cannot be made: kernels run as they are.
add_test(NAME runtime-context-stream-fails COMMAND RuntimeTests
         --gtest_filter=ContextStreamFails.*)
set_tests_properties(runtime-context-stream-fails PROPERTIES ENVIRONMENT
  "${_rt_env};TALLY_FORCE=ptb;TALLY_SCHEDULE=0")
# Sampled timing: one launch in four timed, the rest estimated.
tally_stats_test(runtime-stats-sampled "StatsTiming.*"
  "${_rt_env};TALLY_FORCE=ptb;TALLY_STATS_TIMING=4;FAKE_ELAPSED_US=10" check-stats-sampled.py)
# TALLY_STATS naming a link (or /dev/null, a pipe): written through, the
# link left as it is (only a regular file is replaced, by a rename).
file(REMOVE ${_rt_dir}/stats-link.json ${_rt_dir}/stats-target.json)
file(CREATE_LINK stats-target.json ${_rt_dir}/stats-link.json SYMBOLIC)
add_test(NAME runtime-stats-link COMMAND RuntimeTests --gtest_filter=ForcePtb.LaunchGatesTheStreamAndEveryBlockRunsOnce)
set_tests_properties(runtime-stats-link PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_STATS=${_rt_dir}/stats-link.json"
  FIXTURES_SETUP stats-link)
add_test(NAME runtime-stats-link-check
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-stats-link.py ${_rt_dir}/stats-link.json)
set_tests_properties(runtime-stats-link-check PROPERTIES FIXTURES_REQUIRED stats-link)
add_test(NAME runtime-blocking-call COMMAND RuntimeTests --gtest_filter=BlockingCall.*)
set_tests_properties(runtime-blocking-call PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_PREEMPT=random:6;TALLY_LOG_LEVEL=debug"
  FAIL_REGULAR_EXPRESSION "TIMED OUT|FAILED|LOAD-UNDER-STOP" TIMEOUT 120)
add_test(NAME runtime-force-only COMMAND RuntimeTests --gtest_filter=ForceOnly.*)
set_tests_properties(runtime-force-only PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_FORCE_ONLY=^picked_[0-9]+$")
add_test(NAME runtime-force-only-bad COMMAND RuntimeTests --gtest_filter=BadSetting.*)
set_tests_properties(runtime-force-only-bad PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_FORCE_ONLY=(unclosed"
  PASS_REGULAR_EXPRESSION "bad value .\\(unclosed. for TALLY_FORCE_ONLY"
  FAIL_REGULAR_EXPRESSION "FAILED")
add_test(NAME runtime-force-slice COMMAND RuntimeTests --gtest_filter=ForceSlice.*)
set_tests_properties(runtime-force-slice PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=slice;TALLY_SLICE_BLOCKS=3")
add_test(NAME runtime-ptb-workers COMMAND RuntimeTests --gtest_filter=PtbWorkers.*)
set_tests_properties(runtime-ptb-workers PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_PTB_WORKERS_PER_SM=1")
add_test(NAME runtime-context-gone-at-exit COMMAND RuntimeTests --gtest_filter=ContextGoneAtExit.*)
set_tests_properties(runtime-context-gone-at-exit PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=ptb;TALLY_STATS=1"
  FAIL_REGULAR_EXPRESSION "DEAD|LOAD-UNDER-STOP|FAILED")
add_test(NAME runtime-bad-setting COMMAND RuntimeTests --gtest_filter=BadSetting.*)
set_tests_properties(runtime-bad-setting PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_FORCE=fastest"
  PASS_REGULAR_EXPRESSION "bad value .fastest. for TALLY_FORCE"
  FAIL_REGULAR_EXPRESSION "FAILED")

# What the beside tests (under MPS) share: no profile cache, HP never
# silent long enough for Free mode, statistics, an MPS client.
set(_beside_env "TALLY_PROFILE_CACHE=0;TALLY_SILENCE_MS=60000;TALLY_STATS=1;FAKE_MPS=1")
# Scheduling across processes: each with a segment folder of its own, so
# tests running in parallel do not see each other's processes.
# A BE process held while the test plays an active HP process; it measures
# the forms of its kernel while HP is idle and saves them in its profile
# cache; a second run of it reuses the cache (no measurements).
add_test(NAME runtime-schedule-be-clean
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${_rt_dir}/cache-be ${_rt_dir}/be-stats.json
          ${_rt_dir}/be-stats-again.json)
set_tests_properties(runtime-schedule-be-clean PROPERTIES FIXTURES_SETUP runtime-be-clean)
add_test(NAME runtime-schedule-be COMMAND RuntimeTests --gtest_filter=ScheduleBe.HeldWhileHpIsActive)
set_tests_properties(runtime-schedule-be PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-be;TALLY_CACHE_DIR=${_rt_dir}/cache-be;TALLY_STATS=${_rt_dir}/be-stats.json;TALLY_FREE_MEASURE=1"
  # The one hold (HP active for about 150 ms) counted for the kernel too.
  PASS_REGULAR_EXPRESSION "held longest, by kernel: be_held [0-9]+\\.[0-9] ms \\(1 holds\\)"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP" FIXTURES_REQUIRED runtime-be-clean
  FIXTURES_SETUP runtime-be-first)
add_test(NAME runtime-schedule-be-again COMMAND RuntimeTests --gtest_filter=ScheduleBe.HeldWhileHpIsActive)
set_tests_properties(runtime-schedule-be-again PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-be;TALLY_CACHE_DIR=${_rt_dir}/cache-be;TALLY_STATS=${_rt_dir}/be-stats-again.json"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP" FIXTURES_REQUIRED runtime-be-first
  FIXTURES_SETUP runtime-be-second)
add_test(NAME runtime-schedule-be-profile
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-schedule.py ${_rt_dir}/be-stats.json
          ${_rt_dir}/cache-be ${_rt_dir}/be-stats-again.json)
set_tests_properties(runtime-schedule-be-profile PROPERTIES FIXTURES_REQUIRED runtime-be-second)
# Free mode (no HP process in its own segment folder): the profile filled
# among the launches (ScheduleBe.FormsAreMeasuredWithoutHp).
file(MAKE_DIRECTORY ${_rt_dir}/shm-free-all ${_rt_dir}/shm-free-early ${_rt_dir}/shm-free-off)
foreach(_case "all;;10 measurements kept, 0 discarded" "early;FAKE_ELAPSED_US=10;2 measurements kept, 0 discarded")
  list(GET _case 0 _name)
  list(GET _case 1 _extra)
  list(GET _case 2 _kept)
  add_test(NAME runtime-schedule-free-measure-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.FormsAreMeasuredWithoutHp)
  set_tests_properties(runtime-schedule-free-measure-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-free-${_name};TALLY_PROFILE_CACHE=0;TALLY_STATS=1;TALLY_FREE_MEASURE=1;${_extra}"
    PASS_REGULAR_EXPRESSION "profile measured with no HP activity: [0-9]+ launches measuring \\(${_kept}"
    FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
file(MAKE_DIRECTORY ${_rt_dir}/shm-free-async)
add_test(NAME runtime-schedule-free-measure-async
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.FreeMeasurementsNeverHoldTheProgram)
set_tests_properties(runtime-schedule-free-measure-async PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-free-async;TALLY_PROFILE_CACHE=0;TALLY_STATS=1;TALLY_SILENCE_MS=20;TALLY_FREE_MEASURE=1"
  TIMEOUT 60
  PASS_REGULAR_EXPRESSION "profile measured with no HP activity: [0-9]+ launches measuring \\([0-9]+ measurements kept, 1 discarded"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-free-measure-off
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.FormsAreMeasuredWithoutHp)
set_tests_properties(runtime-schedule-free-measure-off PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-free-off;TALLY_PROFILE_CACHE=0;TALLY_STATS=1;TALLY_FREE_MEASURE=0"
  PASS_REGULAR_EXPRESSION "PASSED"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|profile measured with no HP activity")
add_test(NAME runtime-schedule-max-hold COMMAND RuntimeTests --gtest_filter=ScheduleBe.AHoldEndsAtTheBound)
set_tests_properties(runtime-schedule-max-hold PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-max-hold;TALLY_PROFILE_CACHE=0;TALLY_MAX_HOLD_US=200000;TALLY_SILENCE_MS=60000;TALLY_STATS=1"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "held 2 times for [0-9.]+ ms in all \\(2 of them ended after 200000 us: --max-hold-us\\).*15 launches measuring \\(14 measurements kept, 0 discarded"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-queue COMMAND RuntimeTests --gtest_filter=ScheduleBe.QueueBudget)
set_tests_properties(runtime-schedule-queue PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-queue;TALLY_CACHE_DIR=${_rt_dir}/cache-queue;TALLY_QUEUE_US=70;TALLY_SILENCE_MS=60000;TALLY_STATS=1;CUDA_DEVICE_MAX_CONNECTIONS=32"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "queue budget 70 us: [1-9][0-9]* launches queued behind earlier ones"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|nothing queued behind")
# The same launches (PTB, chosen) with fewer than 32 hardware work queues,
# or the variable unset (set empty, which the runtime reads as unset, so
# that one in the environment ctest runs in does not count):
# nothing is queued behind a launch's gate (on an H200 under MPS, launches
# queued there kept a preempted launch's resumption from starting), and a
# BE launch first waits for the latest preemptible launch to pass its gate
# (the fake's events are held: even the first waits).
foreach(_q 8 unset)
  if(_q STREQUAL "unset")
    set(_qenv ";CUDA_DEVICE_MAX_CONNECTIONS=")
  else()
    set(_qenv ";CUDA_DEVICE_MAX_CONNECTIONS=${_q}")
  endif()
  add_test(NAME runtime-schedule-queue-gates-${_q} COMMAND RuntimeTests --gtest_filter=ScheduleBe.QueueBudget)
  set_tests_properties(runtime-schedule-queue-gates-${_q} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-queue-gates-${_q};TALLY_CACHE_DIR=${_rt_dir}/cache-queue-gates-${_q};TALLY_QUEUE_US=70;TALLY_SILENCE_MS=60000;TALLY_STATS=1;TEST_QUEUE_FIT=0${_qenv}"
    TIMEOUT 120
    PASS_REGULAR_EXPRESSION "queue budget 70 us: 0 launches queued behind earlier ones. nothing queued behind [1-9][0-9]* preemptible PTB launches \\(fewer than 32 hardware work queues.*[^0-9][1-9][0-9]* launches waited for a preemptible PTB launch to pass its gate first"
    FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|Sanitizer|Segmentation|Abort")
endforeach()
# A launch-bound HP process (its published wait share under
# --hp-wait-share) is not waited for by a below-normal-priority MPS client;
# with the rule off (0) it is.
add_test(NAME runtime-schedule-launch-bound COMMAND RuntimeTests --gtest_filter=ScheduleBe.LaunchBoundHpIsNotWaitedFor)
set_tests_properties(runtime-schedule-launch-bound PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-launch-bound;${_beside_env};CUDA_MPS_CLIENT_PRIORITY=1"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "tally: 1 launches started beside HP instead of waiting, every HP process waiting for the GPU less than 25 % of its requests' time"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-launch-bound-off COMMAND RuntimeTests --gtest_filter=ScheduleBe.LaunchBoundHpIsNotWaitedFor)
set_tests_properties(runtime-schedule-launch-bound-off PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-launch-bound-off;${_beside_env};CUDA_MPS_CLIENT_PRIORITY=1;TALLY_HP_WAIT_SHARE=0;TEST_SHARE_OFF=1"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "PASSED"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|started beside HP instead of waiting")
# Without TALLY_QUEUE_US: an MPS client of below-normal priority queues
# within the default budget (1000 us: 31 launches of 31.25 us); at normal
# priority, or with the budget given as 0, one launch at a time.
function(tally_queue_mps_test NAME PRIO FIT ENV PASS FAIL)
  add_test(NAME runtime-schedule-queue-mps-${NAME} COMMAND RuntimeTests --gtest_filter=ScheduleBe.QueueBudget)
  set_tests_properties(runtime-schedule-queue-mps-${NAME} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-queue-${NAME};TALLY_CACHE_DIR=${_rt_dir}/cache-queue-${NAME};TALLY_SILENCE_MS=60000;TALLY_STATS=1;FAKE_MPS=1;CUDA_MPS_CLIENT_PRIORITY=${PRIO};TEST_QUEUE_FIT=${FIT}${ENV}"
    TIMEOUT 120 PASS_REGULAR_EXPRESSION "${PASS}" FAIL_REGULAR_EXPRESSION "${FAIL}")
endfunction()
tally_queue_mps_test(default 1 31 ""
  "queue budget 1000 us \\(the default of a below-normal-priority MPS client\\): [1-9][0-9]* launches queued"
  "FAILED|DEAD")
tally_queue_mps_test(normal 0 0 "" "PASSED" "FAILED|DEAD|queue budget")
tally_queue_mps_test(given0 1 0 ";TALLY_QUEUE_US=0" "PASSED" "FAILED|DEAD|queue budget")
# An HP process that says it is no MPS client (time-sliced against BE): the
# default budget is not used while it is there.
tally_queue_mps_test(hp-no-mps 1 0 ";TEST_HP_NO_MPS=1" "an HP process is not an MPS client"
  "FAILED|DEAD|[1-9][0-9]* launches queued")
# Short kernels beside HP under MPS (the fake answers the MPS attribute with
# FAKE_MPS and times every measured launch at FAKE_ELAPSED_US), and three
# cases where they must be held: beside turned off, no MPS, too long; the
# same for launches with a cluster attribute (only the original can run
# them: measured and let beside HP all the same). As a client of
# below-normal priority (the last field), a kernel of 100 us in 5 waves
# (40 blocks, 8 per wave in the fake) goes beside HP for its 20 us waves;
# not at normal priority, nor with waves of 100 us, nor with a cluster
# (its occupancy is not known). And the short kernel held when an HP
# process says it is no MPS client (the last field).
foreach(_case "beside;1;10;1;1;plain;0;0" "beside-off;1;10;0;0;plain;0;0" "beside-no-mps;0;10;1;0;plain;0;0"
              "beside-long;1;500;1;0;plain;0;0" "beside-cluster;1;10;1;1;cluster;0;0"
              "beside-cluster-long;1;500;1;0;cluster;0;0"
              "beside-waves;1;100;1;1;plain;1;0" "beside-waves-normal;1;100;1;0;plain;0;0"
              "beside-waves-long;1;500;1;0;plain;1;0" "beside-waves-cluster;1;100;1;0;cluster;1;0"
              "beside-waves-no-mps;0;100;1;0;plain;1;0" "beside-hp-no-mps;1;10;1;0;plain;0;1")
  list(GET _case 0 _name)
  list(GET _case 1 _mps)
  list(GET _case 2 _us)
  list(GET _case 3 _on)
  list(GET _case 4 _expect)
  list(GET _case 5 _launch)
  list(GET _case 6 _prio)
  list(GET _case 7 _hpnomps)
  add_test(NAME runtime-schedule-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.ShortKernelsRunBesideHp)
  set_tests_properties(runtime-schedule-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${_name};TALLY_PROFILE_CACHE=0;TALLY_SILENCE_MS=60000;TALLY_STATS=1;FAKE_MPS=${_mps};FAKE_ELAPSED_US=${_us};TALLY_BESIDE=${_on};TEST_EXPECT_BESIDE=${_expect};TEST_LAUNCH=${_launch};CUDA_MPS_CLIENT_PRIORITY=${_prio};TEST_HP_NO_MPS=${_hpnomps}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
set_tests_properties(runtime-schedule-beside-hp-no-mps PROPERTIES
  PASS_REGULAR_EXPRESSION "an HP process is not an MPS client")
# As a client of below-normal priority, a kernel with variants whose
# original runs in 10 us waves runs as the original beside HP with
# TALLY_BESIDE_WAVE_US=15; by default (0, the rule off), as a narrow PTB
# launch.
function(tally_short_waves_test NAME EXPECT ENV)
  add_test(NAME runtime-schedule-${NAME}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.ShortWavesRunAsTheOriginalBesideHp)
  set_tests_properties(runtime-schedule-${NAME} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${NAME};${_beside_env};FAKE_ELAPSED_US=50;CUDA_MPS_CLIENT_PRIORITY=1;TEST_EXPECT_ORIGINAL=${EXPECT}${ENV}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endfunction()
tally_short_waves_test(short-waves 1 ";TALLY_BESIDE_WAVE_US=15")
tally_short_waves_test(short-waves-off 0 "")
add_test(NAME runtime-schedule-beside-revoked
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.ABesideKernelThatRunsLongIsHeldAgain)
set_tests_properties(runtime-schedule-beside-revoked PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-beside-revoked;${_beside_env};FAKE_ELAPSED_US=10"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "short launches timed again \\(with HP idle\\), [4-9] of them over the target. 1 shapes timed too long too often"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-beside-slices
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.ShortSlicesRunBesideHp)
set_tests_properties(runtime-schedule-beside-slices PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-beside-slices;${_beside_env};FAKE_ELAPSED_US=100"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "[^0-9]1 times HP arrived while a BE kernel that cannot be stopped ran.*beside HP \\(MPS\\): 2 short launches started while HP was busy"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
foreach(_case "small;50;1" "small-off;0;0")
  list(GET _case 0 _name)
  list(GET _case 1 _pct)
  list(GET _case 2 _expect)
  add_test(NAME runtime-schedule-beside-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.SmallGridsRunBesideHpWhateverTheirTime)
  set_tests_properties(runtime-schedule-beside-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-beside-${_name};${_beside_env};FAKE_ELAPSED_US=500;TALLY_BESIDE_PTB_PERCENT=${_pct};TEST_EXPECT_SMALL=${_expect}"
    TIMEOUT 120
    PASS_REGULAR_EXPRESSION "beside HP \\(MPS\\): ${_expect} short launches started while HP was busy \\(${_expect} of them small grids\\)"
    FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
add_test(NAME runtime-schedule-beside-check-discarded
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.ABesideCheckWhileHpCameByIsDiscarded)
set_tests_properties(runtime-schedule-beside-check-discarded PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-beside-check;${_beside_env};FAKE_ELAPSED_US=10"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "0 shapes timed too long too often"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
# Checks of short launches read once ended: never waited for (every event
# held unfinished), and on the per-thread default stream too; two checks
# read in each.
foreach(_case "nowait;ABesideCheckIsNeverWaitedFor" "ptsz;ABesideKernelOnThePerThreadStreamIsCheckedToo")
  list(GET _case 0 _name)
  list(GET _case 1 _filter)
  add_test(NAME runtime-schedule-beside-check-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.${_filter})
  set_tests_properties(runtime-schedule-beside-check-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-beside-${_name};${_beside_env};FAKE_ELAPSED_US=10;CUDA_MPS_CLIENT_PRIORITY=1"
    TIMEOUT 120
    PASS_REGULAR_EXPRESSION "short. 2 short launches timed again \\(with HP idle\\), 0 of them over the target. 0 shapes"
    FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
set_tests_properties(runtime-schedule-beside PROPERTIES
  PASS_REGULAR_EXPRESSION "beside HP \\(MPS\\): [1-9][0-9]* short launches started while HP was busy \\(0 of them small grids\\). kernels without variants measured at [1-9]")

# PTB launches beside HP under MPS with part of their workers; and the cases
# where they wait for HP instead: the share set to 0, no MPS.
foreach(_case "narrow;1;50;1" "narrow-off;1;0;0" "narrow-no-mps;0;50;0")
  list(GET _case 0 _name)
  list(GET _case 1 _mps)
  list(GET _case 2 _pct)
  list(GET _case 3 _expect)
  add_test(NAME runtime-schedule-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.PtbLaunchesRunNarrowBesideHp)
  set_tests_properties(runtime-schedule-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${_name};TALLY_PROFILE_CACHE=0;TALLY_SILENCE_MS=60000;TALLY_STATS=1;FAKE_MPS=${_mps};FAKE_ELAPSED_US=100;TALLY_WIDEN_US=200000;TALLY_NARROW_UNWATCHED_US=0;TALLY_BESIDE_PTB_PERCENT=${_pct};TEST_EXPECT_NARROW=${_expect}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
# An HP process that says it is no MPS client: PTB launches leave for it
# and wait (a wide one is stopped, not narrowed, and resumed wide).
add_test(NAME runtime-schedule-narrow-hp-no-mps
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.PtbLaunchesRunNarrowBesideHp)
set_tests_properties(runtime-schedule-narrow-hp-no-mps PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-narrow-hp-no-mps;${_beside_env};FAKE_ELAPSED_US=100;TALLY_WIDEN_US=200000;TALLY_NARROW_UNWATCHED_US=0;TALLY_BESIDE_PTB_PERCENT=50;TEST_EXPECT_NARROW=0;TEST_HP_NO_MPS=1"
  TIMEOUT 120 PASS_REGULAR_EXPRESSION "an HP process that is no MPS client was seen" FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
set_tests_properties(runtime-schedule-narrow PROPERTIES
  PASS_REGULAR_EXPRESSION "PTB beside HP \\(50 % of a wave of workers\\): [1-9][0-9]* launches started narrow \\(0 of them only for being queued behind earlier ones\\), [1-9][0-9]* narrowed for HP \\(counted as preemptions above\\), [1-9][0-9]* widened after 200000 us of quiet")

# A PTB launch queued behind this process's earlier ones starts narrow
# under MPS, and is widened only after the widen window of its own.
add_test(NAME runtime-schedule-queued-narrow
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.QueuedPtbLaunchesStartNarrow)
set_tests_properties(runtime-schedule-queued-narrow PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-queued-narrow;${_beside_env};CUDA_DEVICE_MAX_CONNECTIONS=32;FAKE_ELAPSED_US=100;TALLY_QUEUE_US=1000;TALLY_WIDEN_US=400000;TALLY_NARROW_UNWATCHED_US=0;TALLY_BESIDE_PTB_PERCENT=50"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "launches started narrow \\(1 of them only for being queued behind earlier ones\\)"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")

# A PTB launch narrow beside HP and short on its narrow workers goes
# without the gate's wait (default limit 1000 us); with a lower limit not.
foreach(_case "unwatched;1;TALLY_LOG_LEVEL=warn" "unwatched-off;0;TALLY_NARROW_UNWATCHED_US=100")
  list(GET _case 0 _name)
  list(GET _case 1 _expect)
  list(GET _case 2 _extra)
  add_test(NAME runtime-schedule-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.ShortNarrowLaunchesGoUnwatched)
  set_tests_properties(runtime-schedule-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${_name};${_beside_env};FAKE_ELAPSED_US=100;TALLY_BESIDE_PTB_PERCENT=50;TEST_EXPECT_UNWATCHED=${_expect};${_extra}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
set_tests_properties(runtime-schedule-unwatched PROPERTIES
  PASS_REGULAR_EXPRESSION "quiet. [1-9][0-9]* launches beside HP short enough on their narrow workers ran without a gate, not watched")
set_tests_properties(runtime-schedule-unwatched-off PROPERTIES
  PASS_REGULAR_EXPRESSION "quiet. 0 launches beside HP short enough on their narrow workers ran without a gate, not watched")

# Launches of a shape still being measured while an HP request runs under
# MPS: narrow PTB beside HP, never stopped or widened (provisional); held as
# before with TALLY_PROVISIONAL=0.
foreach(_case "provisional;1" "provisional-off;0")
  list(GET _case 0 _name)
  list(GET _case 1 _on)
  add_test(NAME runtime-schedule-${_name}
    COMMAND RuntimeTests --gtest_filter=ScheduleBe.ShapesBeingMeasuredRunNarrowBesideHp)
  set_tests_properties(runtime-schedule-${_name} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${_name};${_beside_env};FAKE_ELAPSED_US=100;TALLY_IDLE_US=200000;TALLY_WIDEN_US=1000;TALLY_BESIDE_PTB_PERCENT=50;TALLY_PROVISIONAL=${_on};TEST_EXPECT_PROVISIONAL=${_on}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
set_tests_properties(runtime-schedule-provisional PROPERTIES
  PASS_REGULAR_EXPRESSION "[0-9]+ launches measuring \\(2 measurements kept, [0-9]+ discarded because HP came by\\).*0 widened after 200000 us of quiet.*[^0-9]2 launches of shapes still being measured started narrow beside a running HP request, not widened\n")
set_tests_properties(runtime-schedule-provisional-off PROPERTIES
  PASS_REGULAR_EXPRESSION "0 launches of shapes still being measured started narrow beside a running HP request, not widened \\(off: TALLY_PROVISIONAL=0\\)")

add_test(NAME runtime-schedule-cluster-shape
  COMMAND RuntimeTests --gtest_filter=ScheduleBe.AClusterLaunchNeverTakesTheShapesVariant)
set_tests_properties(runtime-schedule-cluster-shape PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-cluster-shape;TALLY_PROFILE_CACHE=0;TALLY_SILENCE_MS=60000;FAKE_MPS=1;FAKE_ELAPSED_US=100"
  TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")

add_test(NAME runtime-schedule-blocking-call
  COMMAND RuntimeTests --gtest_filter=ScheduleBlocking.*)
set_tests_properties(runtime-schedule-blocking-call PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-blocking;TALLY_CACHE_DIR=${_rt_dir}/cache-blocking;TALLY_FORCE=ptb;TALLY_LOG_LEVEL=debug"
  TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT")
# A scheduled test in a process of its own under forced PTB: NAME runs
# FILTER with its own segment folder (shm-DIR, made here) and cache, the
# further settings ENV, and fails on FAIL (the properties of each entry).
function(tally_forced_ptb_test NAME FILTER DIR ENV FAIL)
  file(MAKE_DIRECTORY ${_rt_dir}/shm-${DIR})
  add_test(NAME ${NAME} COMMAND RuntimeTests --gtest_filter=${FILTER})
  set_tests_properties(${NAME} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-${DIR};TALLY_CACHE_DIR=${_rt_dir}/cache-${DIR};TALLY_FORCE=ptb${ENV}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "${FAIL}")
endfunction()
set(_stuck_fail "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|Sanitizer|Segmentation|Abort")
# A resumption that never starts is reported, once (ScheduleStuck).
tally_forced_ptb_test(runtime-schedule-stuck-resumption "ScheduleStuck.*" stuck "" "${_stuck_fail}")
set_tests_properties(runtime-schedule-stuck-resumption PROPERTIES
  PASS_REGULAR_EXPRESSION "a resumed PTB launch has not started after 2 s, and the program's stream waits for it.*CUDA_DEVICE_MAX_CONNECTIONS=32")
# Kernels and their variants are loaded when first seen, under the drain
# lock, and no flag goes up while a load's stall is not over (ScheduleLoad,
# one test a process, as the stopped-launch tests are).
foreach(_t first:AKernelAndItsVariantsLoadWhenFirstSeen
        stopped:ANewKernelWaitsForAStoppedLaunchsResumption
        stall:NoFlagGoesUpWhileALoadStalls)
  string(REPLACE ":" ";" _p "${_t}")
  list(GET _p 0 _n)
  list(GET _p 1 _f)
  tally_forced_ptb_test(runtime-schedule-load-${_n} "ScheduleLoad.${_f}" load-${_n}
    ";TALLY_STATS=1" "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT")
endforeach()
# (The stall's statistics line: the preemption put off is counted.)
set_tests_properties(runtime-schedule-load-stall PROPERTIES
  PASS_REGULAR_EXPRESSION "[^0-9]1 preemptions put off: a kernel's code had just been loaded")
# The program's own lookup loads code (FAKE_LOOKUP_LOADS=1, lazy loading):
# made while a launch is stopped it waits for the resumption; made while one
# runs it is marked, and no flag goes up until its stall is over.
tally_forced_ptb_test(runtime-schedule-load-lookup-stopped
  "ScheduleLoad.TheProgramsLookupWaitsForAStoppedLaunchsResumption" load-lookup-stopped
  ";FAKE_LOOKUP_LOADS=1" "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|Sanitizer|Segmentation|Abort")
set_tests_properties(runtime-schedule-load-lookup-stopped PROPERTIES PASS_REGULAR_EXPRESSION "PASSED")
# Fewer than 32 work queues: a launch waits for a gated one to pass its
# gate, in Free mode too; with 32 it does not.
tally_forced_ptb_test(runtime-schedule-gate-wait-8 "ScheduleGate.*" gate-wait-8
  ";TALLY_STATS=1;CUDA_DEVICE_MAX_CONNECTIONS=8;TEST_FEW_QUEUES=1"
  "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|Sanitizer|Segmentation|Abort")
set_tests_properties(runtime-schedule-gate-wait-8 PROPERTIES
  PASS_REGULAR_EXPRESSION "[^0-9]1 launches waited for a preemptible PTB launch to pass its gate first")
tally_forced_ptb_test(runtime-schedule-gate-wait-32 "ScheduleGate.*" gate-wait-32
  ";TALLY_STATS=1;CUDA_DEVICE_MAX_CONNECTIONS=32"
  "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|Sanitizer|Segmentation|Abort|waited for a preemptible")
set_tests_properties(runtime-schedule-gate-wait-32 PROPERTIES PASS_REGULAR_EXPRESSION "PASSED")
tally_forced_ptb_test(runtime-schedule-load-lookup "ScheduleLoad.NoFlagGoesUpAfterTheProgramsOwnLookup"
  load-lookup ";TALLY_STATS=1;FAKE_LOOKUP_LOADS=1"
  "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|Sanitizer|Segmentation|Abort")
set_tests_properties(runtime-schedule-load-lookup PROPERTIES
  PASS_REGULAR_EXPRESSION "[^0-9]1 preemptions put off: a kernel's code had just been loaded.*[1-9][0-9]* of the program's own lookups and loads marked")
# At the debug level the same says what the launch waits for (its events,
# its flag word and control block).
tally_forced_ptb_test(runtime-schedule-stuck-described "ScheduleStuck.*" stuckd
  ";TALLY_LOG_LEVEL=debug" "${_stuck_fail}")
set_tests_properties(runtime-schedule-stuck-described PROPERTIES
  PASS_REGULAR_EXPRESSION "stuck waiting for its [a-z ()]+: events start pending, end pending, gate pending.*resumed, [0-9]+ workers .*control block next [0-9]+, flag [0-9]+, done [0-9]+")
# A resumption whose kernel runs no block is reported too (ScheduleStalledResumption).
tally_forced_ptb_test(runtime-schedule-stalled-resumption "ScheduleStalledResumption.*" stalled
  "" "${_stuck_fail}")
set_tests_properties(runtime-schedule-stalled-resumption PROPERTIES
  PASS_REGULAR_EXPRESSION "a resumed PTB launch has run no block for 2 s, and the program's stream waits for it.*CUDA_DEVICE_MAX_CONNECTIONS=32")
# A resumption that started and runs long is not (ScheduleLongResumption).
tally_forced_ptb_test(runtime-schedule-long-resumption "ScheduleLongResumption.*" long ""
  "FAILED|DEAD|LOAD-UNDER-STOP|TIMED OUT|has not started after")
# One hardware work queue: preemptible PTB launches run as originals.
file(MAKE_DIRECTORY ${_rt_dir}/shm-one-queue)
add_test(NAME runtime-one-work-queue
  COMMAND RuntimeTests --gtest_filter=OneWorkQueue.*)
set_tests_properties(runtime-one-work-queue PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-one-queue;TALLY_CACHE_DIR=${_rt_dir}/cache-one-queue;TALLY_FORCE=ptb;CUDA_DEVICE_MAX_CONNECTIONS=1"
  TIMEOUT 120
  PASS_REGULAR_EXPRESSION "CUDA_DEVICE_MAX_CONNECTIONS=1: every stream shares one hardware work queue"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|Sanitizer|Segmentation|Abort")
# The armed preemption flag, and the flag raised by driver calls.
foreach(_armed 1 0)
  add_test(NAME runtime-schedule-armed-${_armed}
    COMMAND RuntimeTests --gtest_filter=ScheduleArmed.*)
  set_tests_properties(runtime-schedule-armed-${_armed} PROPERTIES
    ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-armed-${_armed};TALLY_CACHE_DIR=${_rt_dir}/cache-armed-${_armed};TALLY_FORCE=ptb;TALLY_ARMED_FLAG=${_armed};TEST_ARMED=${_armed}"
    TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
endforeach()
add_test(NAME runtime-schedule-dead-hp COMMAND RuntimeTests --gtest_filter=ScheduleBe.ADeadHpProcessDoesNotHoldIt)
set_tests_properties(runtime-schedule-dead-hp PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-dead;TALLY_CACHE_DIR=${_rt_dir}/cache-dead"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp COMMAND RuntimeTests --gtest_filter=ScheduleHp.LaunchesAreAnnounced)
set_tests_properties(runtime-schedule-hp PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp;TALLY_PRIORITY=high;TALLY_STATS=1;TALLY_STATS_TURNAROUND=1;TALLY_HP_COMPLETION=side"
  PASS_REGULAR_EXPRESSION "HP turnaround \\(launch call to completion seen\\) over 3 launches"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
# The same as an MPS client (the driver says so): no flag in its slot.
add_test(NAME runtime-schedule-hp-mps COMMAND RuntimeTests --gtest_filter=ScheduleHp.LaunchesAreAnnounced)
set_tests_properties(runtime-schedule-hp-mps PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-mps;TALLY_PRIORITY=high;TALLY_HP_COMPLETION=side;FAKE_MPS=1"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp-slow COMMAND RuntimeTests --gtest_filter=ScheduleHpSlow.*)
set_tests_properties(runtime-schedule-hp-slow PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-slow;TALLY_PRIORITY=high;TALLY_STATS=1"
  PASS_REGULAR_EXPRESSION "HP launch calls with a part over 1000 us: [0-9]+ in the lookup \\(longest [0-9.]+ us\\), [0-9]+ waiting for the issue lock \\([0-9.]+ us\\), 3 in the driver's launch \\((29[0-9][0-9]|[3-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]+)\\.[0-9] us\\)"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
# The same run's mean per part: the driver's 3 ms in the driver's part.
add_test(NAME runtime-schedule-hp-slow-mean COMMAND RuntimeTests --gtest_filter=ScheduleHpSlow.*)
set_tests_properties(runtime-schedule-hp-slow-mean PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-slow-mean;TALLY_PRIORITY=high;TALLY_STATS=1"
  PASS_REGULAR_EXPRESSION "HP launch calls, mean per call: [0-9.]+ us in the lookup, [0-9.]+ us waiting for the issue lock, (29[0-9][0-9]|[3-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]+)\\.[0-9]+ us in the driver's launch, [0-9.]+ us reporting the completion \\(3 calls\\)"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp-none COMMAND RuntimeTests --gtest_filter=ScheduleHpNone.NoneReportsNothing)
set_tests_properties(runtime-schedule-hp-none PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-none;TALLY_PRIORITY=high;TALLY_STATS=1;TALLY_HP_COMPLETION=none"
  PASS_REGULAR_EXPRESSION "3 launches announced to best-effort processes \\(completions not reported: TALLY_HP_COMPLETION=none. 0 completion writes\\)"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp-threads
  COMMAND RuntimeTests --gtest_filter=ScheduleHp.CompletionsInLaunchOrderAcrossThreadsAndStreams)
set_tests_properties(runtime-schedule-hp-threads PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp3;TALLY_PRIORITY=high;TALLY_STATS=1;TALLY_STATS_TURNAROUND=1;TALLY_HP_COMPLETION=side"
  PASS_REGULAR_EXPRESSION "HP turnaround \\(launch call to completion seen\\) over 600 launches"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp-burst COMMAND RuntimeTests --gtest_filter=ScheduleHpBurst.*)
set_tests_properties(runtime-schedule-hp-burst PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-burst;TALLY_PRIORITY=high;TALLY_HP_COMPLETION=burst;TALLY_HP_BURST_US=300000;TALLY_STATS=1;TALLY_STATS_TIMING=0;FAKE_LOG_RECORDS=1"
  PASS_REGULAR_EXPRESSION "completion writes, one per burst"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
# A forked child's exit(), as HP (taking part in scheduling: heartbeat and
# completion threads) and as BE with preemptions (the preemptor).
file(MAKE_DIRECTORY ${_rt_dir}/shm-fork-hp ${_rt_dir}/shm-fork-be ${_rt_dir}/shm-stats-child)
add_test(NAME runtime-forked-child-hp COMMAND RuntimeTests --gtest_filter=ForkedChild.*)
set_tests_properties(runtime-forked-child-hp PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-fork-hp;TALLY_PRIORITY=high;TALLY_STATS=${_rt_dir}/fork-hp.json"
  TIMEOUT 60 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP|no scheduling")
add_test(NAME runtime-forked-child-be COMMAND RuntimeTests --gtest_filter=ForkedChild.*)
set_tests_properties(runtime-forked-child-be PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-fork-be;TALLY_FORCE=ptb;TALLY_PREEMPT=random:6;TALLY_STATS=${_rt_dir}/fork-be.json"
  TIMEOUT 60 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
# A child that inherited --stats=FILE writes FILE.PID.json (exec'd again:
# the runtime starts afresh in it).
add_test(NAME runtime-stats-child COMMAND RuntimeTests --gtest_filter=StatsChild.*)
set_tests_properties(runtime-stats-child PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-stats-child;TALLY_STATS=${_rt_dir}/stats-child/s.json"
  TIMEOUT 60 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
file(MAKE_DIRECTORY ${_rt_dir}/stats-child)
add_test(NAME runtime-schedule-hp-burst-default COMMAND RuntimeTests --gtest_filter=ScheduleHpBurstDefault.*)
set_tests_properties(runtime-schedule-hp-burst-default PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp-burst-default;TALLY_PRIORITY=high;TALLY_HP_COMPLETION=burst"
  TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-schedule-hp-own-stream COMMAND RuntimeTests --gtest_filter=ScheduleHp.*)
set_tests_properties(runtime-schedule-hp-own-stream PROPERTIES
  ENVIRONMENT "${_rt_env};TALLY_SHM_DIR=${_rt_dir}/shm-hp2;TALLY_PRIORITY=high;TALLY_HP_COMPLETION=gpu"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")

# PTX loaded at run time: the real tally-opt of this build transforms it
# (best-effort, the default priority); an HP process loads it as it came.
set(_ptx_env "${_rt_env};TALLY_OPT=$<TARGET_FILE:tally-opt>;TALLY_CACHE_DIR=${_rt_dir}/cache-ptx;TALLY_TEST_PTX=${PROJECT_SOURCE_DIR}/test/outside-ptx/triton/triton_006_add.ptx")
add_test(NAME runtime-ptx COMMAND RuntimeTests --gtest_filter=RuntimePtx.*)
set_tests_properties(runtime-ptx PROPERTIES
  ENVIRONMENT "${_ptx_env};TALLY_SHM_DIR=${_rt_dir}/shm-ptx;TALLY_STATS=1"
  PASS_REGULAR_EXPRESSION "run-time PTX: 6 modules, 6 transformed \\([0-9] from the cache.*1 of the transformed rejected by the driver.*1 later PTX inputs of a link"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-ptx-hp COMMAND RuntimeTests --gtest_filter=RuntimePtxOff.*)
set_tests_properties(runtime-ptx-hp PROPERTIES
  ENVIRONMENT "${_ptx_env};TALLY_SHM_DIR=${_rt_dir}/shm-ptx-hp;TALLY_PRIORITY=high"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")
add_test(NAME runtime-ptx-off COMMAND RuntimeTests --gtest_filter=RuntimePtxOff.*)
set_tests_properties(runtime-ptx-off PROPERTIES
  ENVIRONMENT "${_ptx_env};TALLY_SHM_DIR=${_rt_dir}/shm-ptx-off;TALLY_RUNTIME_PTX=0"
  FAIL_REGULAR_EXPRESSION "FAILED|DEAD|LOAD-UNDER-STOP")

# `tally run`: everything after `--` is the command, also right after an
# option with an optional value (`--stats`). Not in sanitizer builds: the
# instrumented libtally.so cannot be preloaded into /bin/echo.
if(NOT TALLY_SANITIZE)
  add_test(NAME tally-run-command-after-dashes
    COMMAND $<TARGET_FILE:tally> run --stats -- /bin/echo --steps 3 -- --stats)
  set_tests_properties(tally-run-command-after-dashes PROPERTIES
    PASS_REGULAR_EXPRESSION "^--steps 3 -- --stats")
  # A best-effort process becomes an MPS client of below-normal priority,
  # unless the variable is set or --no-mps-priority is given; an HP process
  # is left as it is.
  add_test(NAME tally-run-mps-priority
    COMMAND sh -c "unset CUDA_MPS_CLIENT_PRIORITY; p='echo \"[\${CUDA_MPS_CLIENT_PRIORITY-unset}]\"'; \"$0\" run -- sh -c \"$p\"; \"$0\" run --priority=high -- sh -c \"$p\"; \"$0\" run --no-mps-priority -- sh -c \"$p\"; CUDA_MPS_CLIENT_PRIORITY=0 \"$0\" run -- sh -c \"$p\""
            $<TARGET_FILE:tally>)
  set_tests_properties(tally-run-mps-priority PROPERTIES
    PASS_REGULAR_EXPRESSION "^\\[1\\]\n\\[unset\\]\n\\[unset\\]\n\\[0\\]\n$")
  # A best-effort process asks for 32 hardware work queues (Config::
  # WorkQueues) unless the variable is set (empty counts as unset); an HP
  # process is left as it is.
  add_test(NAME tally-run-work-queues
    COMMAND sh -c "unset CUDA_DEVICE_MAX_CONNECTIONS; p='echo \"[\${CUDA_DEVICE_MAX_CONNECTIONS-unset}]\"'; \"$0\" run -- sh -c \"$p\"; \"$0\" run --priority=high -- sh -c \"$p\"; CUDA_DEVICE_MAX_CONNECTIONS=4 \"$0\" run -- sh -c \"$p\"; CUDA_DEVICE_MAX_CONNECTIONS= \"$0\" run -- sh -c \"$p\""
            $<TARGET_FILE:tally>)
  set_tests_properties(tally-run-work-queues PROPERTIES
    PASS_REGULAR_EXPRESSION "^\\[32\\]\n\\[unset\\]\n\\[4\\]\n\\[32\\]\n$")
endif()
# A value out of range: a clear error and exit status 1 (not CLI11's own code).
add_test(NAME tally-run-bad-value
  COMMAND sh -c "\"$0\" run --beside-ptb-percent=101 -- true 2>&1; echo exit=$?"
          $<TARGET_FILE:tally>)
set_tests_properties(tally-run-bad-value PROPERTIES
  PASS_REGULAR_EXPRESSION "--beside-ptb-percent: Value 101 not in range 0 to 100.*exit=1")

# scripts/stats-diff.py (the steady state of the Triton check) on made-up runs.
add_test(NAME stats-diff
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-stats-diff.py
          ${PROJECT_SOURCE_DIR}/scripts/stats-diff.py)
# scripts/stats-timing-compare.py (the GPU round's check of sampled timing)
# on made-up runs.
add_test(NAME stats-timing-compare
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-stats-timing-compare.py
          ${PROJECT_SOURCE_DIR}/scripts/stats-timing-compare.py)
# scripts/colocate-report.py (the co-location benchmark's report) on a
# made-up run: BE kept, HP served, system throughput, preemption columns,
# p50, p99 and p99.9 over HP alone.
add_test(NAME colocate-report
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-colocate-report.py
          ${PROJECT_SOURCE_DIR}/scripts/colocate-report.py)
# scripts/gpu-colocate-suite.py (the whole evaluation in one command) with
# fake workloads, a fake `tally run` and no GPU: its windows, rows, reports,
# the loss check failing on a changed loss, MPS asked for without MPS; its
# Goals table on made-up rows.
add_test(NAME colocate-suite
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check-colocate-suite.py
          ${PROJECT_SOURCE_DIR})
set_tests_properties(colocate-suite PROPERTIES TIMEOUT 300)

# `tally ptx-cache show|clear` on a made-up folder: a corrupt entry, a
# writer's leftover and an input kept after tally-opt's internal error are
# listed, then removed.
add_test(NAME tally-ptx-cache
  COMMAND sh -c "d=$1/ptx-cache-test; rm -rf \"$d\"; mkdir -p \"$d/ptx\" && \
echo junk > \"$d/ptx/00ab.ptxc\" && : > \"$d/ptx/.tmp-1-0-in.ptx\" && \
echo '.version 5.0' > \"$d/ptx/failed-0123.ptx\" && \
TALLY_CACHE_DIR=$d \"$0\" ptx-cache show && TALLY_CACHE_DIR=$d \"$0\" ptx-cache clear && \
TALLY_CACHE_DIR=$d \"$0\" ptx-cache show; ls -A \"$d/ptx\"; echo end"
          $<TARGET_FILE:tally> ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(tally-ptx-cache PROPERTIES
  PASS_REGULAR_EXPRESSION "1 entries\n  00ab.ptxc  corrupt [^\n]*\n  failed-0123.ptx  an input tally-opt failed on \\(internal error\\), kept for a report\nremoved 1 entries and 1 inputs kept for a report from [^\n]*\nno run-time PTX cache entries in [^\n]*\nend")
