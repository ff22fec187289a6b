# Data layer tests: the GPT-2 tokenizer against vectors from the reference (npm) encoder. The
# vocabulary files come from scripts/fetch_assets.sh; the test skips itself when they are missing.
fsdp_unit_test(test_tokenizer test_tokenizer.cpp)
target_compile_definitions(test_tokenizer PRIVATE
                           FSDP_ASSETS_DIR="${PROJECT_SOURCE_DIR}/assets/gpt2"
                           FSDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

# Token files, corpora and their cache, the distributed loaders. The corpus tests need
# assets/gpt2 (and the SOTU test assets/sotu) from scripts/fetch_assets.sh and skip without them.
fsdp_unit_test(test_data test_data.cpp)
target_compile_definitions(test_data PRIVATE
                           FSDP_ASSETS_DIR="${PROJECT_SOURCE_DIR}/assets/gpt2"
                           FSDP_SOTU_DIR="${PROJECT_SOURCE_DIR}/assets/sotu")
