# Checkpoint layer tests.
#
# safetensors (test_safetensors): the reader, the writer and malformed headers in one process
# (safetensors_unit); full-state export and import of a sharded GPT-2 under every strategy on
# 1-4 ranks over MPI and on 2 over Gloo (safetensors_<backend>_np<n>); and an independent check
# of the files we write by tests/safetensors_check.py, run with Debian's Python and its standard
# library only: safetensors_sample (2 ranks) writes the files, safetensors_python_* read them, and
# safetensors_python_selftest shows the checker refusing broken files.
fsdp_test_executable(test_safetensors test_safetensors.cpp)
add_test(NAME safetensors_unit
         COMMAND test_safetensors
                 "--gtest_filter=SafetensorsFile.*:SafetensorsWriter.*:SafetensorsHeader.*:SafetensorsDTypes.*")
set_tests_properties(safetensors_unit PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 60)

set(safetensors_backends "")
if(FSDP_WITH_MPI)
  list(APPEND safetensors_backends mpi)
endif()
if(FSDP_WITH_GLOO)
  list(APPEND safetensors_backends gloo)
endif()
foreach(backend mpi gloo)  # skipped entries for a backend the build lacks (fsdp_mpi_test)
  set(world_sizes 1 2 3 4)
  if(backend STREQUAL "gloo")
    set(world_sizes 2)
  endif()
  foreach(np ${world_sizes})
    fsdp_mpi_test(NAME safetensors_${backend}_np${np} EXE test_safetensors NP ${np}
                  BACKEND ${backend} FILTER "FullState.*" TIMEOUT 300)
  endforeach()
endforeach()

set(FSDP_SYSTEM_PYTHON /usr/bin/python3)
if(EXISTS ${FSDP_SYSTEM_PYTHON} AND safetensors_backends)
  list(GET safetensors_backends 0 sample_backend)
  set(sample_dir ${CMAKE_CURRENT_BINARY_DIR}/safetensors_check)
  file(MAKE_DIRECTORY ${sample_dir})
  fsdp_mpi_test(NAME safetensors_sample EXE test_safetensors NP 2 BACKEND ${sample_backend}
                FILTER "PythonCheckSample.*" TIMEOUT 120)
  set_tests_properties(safetensors_sample PROPERTIES WORKING_DIRECTORY ${sample_dir}
                       FIXTURES_SETUP safetensors_samples)
  set(checker ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_check.py)
  add_test(NAME safetensors_python_gpt2
           COMMAND ${FSDP_SYSTEM_PYTHON} ${checker} --require transformer.wte.weight
                   --require transformer.h.1.mlp.c_proj.weight --forbid lm_head.weight
                   samples/gpt2_fp32.safetensors samples/gpt2_bf16.safetensors
           WORKING_DIRECTORY ${sample_dir})
  add_test(NAME safetensors_python_dtypes
           COMMAND ${FSDP_SYSTEM_PYTHON} ${checker} samples/every_dtype.safetensors
           WORKING_DIRECTORY ${sample_dir})
  set_tests_properties(safetensors_python_gpt2 safetensors_python_dtypes PROPERTIES
                       FIXTURES_REQUIRED safetensors_samples TIMEOUT 60)
  add_test(NAME safetensors_python_selftest COMMAND ${FSDP_SYSTEM_PYTHON} ${checker} --self-test)
  set_tests_properties(safetensors_python_selftest PROPERTIES TIMEOUT 60)
endif()
