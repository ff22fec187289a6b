# Trainer tests. test_config: the configuration layer (defaults, precedence, Accelerate and
# TorchAcc keys, error messages, round trip), over every file in configs/ and the key list in
# docs/config.md.
fsdp_unit_test(test_config test_config.cpp)
target_compile_definitions(test_config PRIVATE
                           FSDP_CONFIGS_DIR="${PROJECT_SOURCE_DIR}/configs"
                           FSDP_DOCS_DIR="${PROJECT_SOURCE_DIR}/docs")

# fsdp-train end to end under fsdp-run: training lowers the validation loss, resume reproduces
# (bitwise at the same world size, within 1e-4 at another), sample, bad input
# (tests/trainer_e2e.sh). Skipped without the npm assets.
if(TARGET fsdp-train)
  foreach(backend mpi gloo)
    math(EXPR port "${FSDP_TEST_PORT} + 1")
    math(EXPR next "${FSDP_TEST_PORT} + 40")  # the script takes one port per run (about 25)
    set(FSDP_TEST_PORT ${next} CACHE INTERNAL "")
    fsdp_backend_test(BACKEND ${backend} NAME trainer_e2e_${backend}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/trainer_e2e.sh $<TARGET_FILE_DIR:fsdp-train>
                     ${backend} ${port} ${PROJECT_SOURCE_DIR})
    set_tests_properties(trainer_e2e_${backend} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
endif()

# Racing writers and interrupted tools at the command line (tests/hostile_tools.sh): two
# consolidates into one output, a lock-file link, outputs inside a root, SIGINT mid-write.
if(TARGET fsdp-train AND TARGET fsdp-ckpt)
  math(EXPR port "${FSDP_TEST_PORT} + 1")
  math(EXPR next "${FSDP_TEST_PORT} + 4")
  set(FSDP_TEST_PORT ${next} CACHE INTERNAL "")
  add_test(NAME hostile_tools COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hostile_tools.sh
                                      $<TARGET_FILE_DIR:fsdp-train> ${PROJECT_SOURCE_DIR} ${port})
  set_tests_properties(hostile_tools PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# The planner (fsdp/plan/plan.h) against the runtime's accounting and counted traffic.
fsdp_test_executable(test_plan test_plan.cpp)
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME plan_mpi_np${np} EXE test_plan NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME plan_gloo_np4 EXE test_plan NP 4 BACKEND gloo)
# Its time model (fsdp/plan/step_time.h) against closed forms.
fsdp_unit_test(test_step_time test_step_time.cpp)

# fsdp-bench and fsdp-plan: a tiny benchmark run checked against the plan, and bad arguments;
# fsdp-bench-adamw on a tiny shard.
if(TARGET fsdp-bench AND TARGET fsdp-plan AND TARGET fsdp-bench-adamw)
  add_test(NAME tools_smoke COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tools_smoke.sh
                                    $<TARGET_FILE_DIR:fsdp-bench> $<BOOL:${FSDP_SANITIZE}>)
  set_tests_properties(tools_smoke PROPERTIES TIMEOUT 300)
endif()

# bench/netem.sh's emulated cluster: a short run across two network namespaces, its prediction,
# and nothing left behind (tests/netem_test.sh); skipped where namespaces cannot be made.
if(TARGET fsdp-bench AND TARGET fsdp-run AND FSDP_WITH_GLOO)
  add_test(NAME netem COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netem_test.sh
                              $<TARGET_FILE_DIR:fsdp-bench> ${PROJECT_SOURCE_DIR})
  # Alone: its prediction is for ranks that have the machine's cores to themselves, and a test
  # beside it (ctest -j2) slowed a 0.16 s step by a third.
  set_tests_properties(netem PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
else()
  fsdp_skipped_test(netem "bench/netem.sh runs fsdp-bench over Gloo: ${FSDP_MISSING_GLOO}")
endif()

# Hugging Face model folders in and out: the fixtures of tests/data/hf/models (scripts/hf_fixtures.sh).
fsdp_unit_test(test_hf test_hf.cpp)
target_compile_definitions(test_hf PRIVATE FSDP_HF_FIXTURES="${PROJECT_SOURCE_DIR}/tests/data/hf"
                                           FSDP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# LoRA against PEFT (tests/data/hf/lora, scripts/lora_fixtures.sh): gradients, logits, greedy
# tokens, merged and adapter exports, bad adapters; at 1 and 2 ranks.
fsdp_test_executable(test_lora test_lora.cpp)
target_compile_definitions(test_lora PRIVATE FSDP_HF_FIXTURES="${PROJECT_SOURCE_DIR}/tests/data/hf")
foreach(np 1 2)
  fsdp_mpi_test(NAME lora_mpi_np${np} EXE test_lora NP ${np} BACKEND mpi)
endforeach()

# Instruction fine-tuning: JSONL examples, packing and the masked loss against transformers
# (tests/data/hf/sft), and hostile JSONL files.
fsdp_unit_test(test_sft test_sft.cpp)
target_compile_definitions(test_sft PRIVATE FSDP_HF_FIXTURES="${PROJECT_SOURCE_DIR}/tests/data/hf"
                           FSDP_CHAT_TEMPLATES_DIR="${PROJECT_SOURCE_DIR}/assets/chat_templates")

# Instruction fine-tuning under fsdp-run (tests/sft_e2e.sh): the first step's loss equal to
# transformers' at world sizes 1 and 2, packed and padded.
if(TARGET fsdp-train)
  math(EXPR port "${FSDP_TEST_PORT} + 1")
  math(EXPR next "${FSDP_TEST_PORT} + 20")
  set(FSDP_TEST_PORT ${next} CACHE INTERNAL "")
  fsdp_backend_test(BACKEND gloo NAME sft_e2e_gloo
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/sft_e2e.sh $<TARGET_FILE_DIR:fsdp-train> gloo
                   ${port} ${PROJECT_SOURCE_DIR})
  set_tests_properties(sft_e2e_gloo PROPERTIES TIMEOUT 600)
endif()
