# Sharded checkpoints: save/load/reshard in one process group at world sizes 1-4 (test_checkpoint),
# and in new processes: resume reproduces, a rank killed mid-save (checkpoint_resume.sh).
fsdp_test_executable(test_checkpoint test_checkpoint.cpp)
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME checkpoint_mpi_np${np} EXE test_checkpoint NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME checkpoint_gloo_np3 EXE test_checkpoint NP 3 BACKEND gloo)
fsdp_test_executable(ckpt_child ckpt_child.cpp)
foreach(backend mpi gloo)
  math(EXPR port "${FSDP_TEST_PORT} + 1")
  math(EXPR next "${FSDP_TEST_PORT} + 20")  # the script takes one port per run
  set(FSDP_TEST_PORT ${next} CACHE INTERNAL "")
  fsdp_backend_test(BACKEND ${backend} NAME checkpoint_resume_${backend}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_resume.sh $<TARGET_FILE_DIR:ckpt_child>
                   ${backend} ${port})
  set_tests_properties(checkpoint_resume_${backend} PROPERTIES TIMEOUT 300)
endforeach()
