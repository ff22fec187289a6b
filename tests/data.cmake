# Data layer tests: the GPT-2 tokenizer against vectors from the reference (npm) encoder. The
# vocabulary files come from scripts/fetch_assets.sh; the test skips itself when they are missing.
fsdp_unit_test(test_tokenizer test_tokenizer.cpp)
target_compile_definitions(test_tokenizer PRIVATE
                           FSDP_ASSETS_DIR="${PROJECT_SOURCE_DIR}/assets/gpt2"
                           FSDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

# Token files, corpora and their cache (with GPT-2's files and with tokenizer.json folders from
# tests/data/hf/tokenizers), the distributed loaders. The GPT-2 corpus tests need assets/gpt2 (and
# the SOTU test assets/sotu) from scripts/fetch_assets.sh and skip without them.
fsdp_unit_test(test_data test_data.cpp)
target_compile_definitions(test_data PRIVATE
                           FSDP_ASSETS_DIR="${PROJECT_SOURCE_DIR}/assets/gpt2"
                           FSDP_SOTU_DIR="${PROJECT_SOURCE_DIR}/assets/sotu"
                           FSDP_HF_TOKENIZERS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/hf/tokenizers")

# tokenizer.json families against the real `tokenizers` library's ids on the SOTU corpus and the
# torture texts (fixtures in tests/data/hf/tokenizers from scripts/hf_fixtures.sh). The corpus
# checks need assets/sotu and skip without it.
fsdp_unit_test(test_hf_tokenizer test_hf_tokenizer.cpp)
target_compile_definitions(test_hf_tokenizer PRIVATE
                           FSDP_HF_TOKENIZERS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/hf/tokenizers"
                           FSDP_ASSETS_DIR="${PROJECT_SOURCE_DIR}/assets/gpt2"
                           FSDP_SOTU_DIR="${PROJECT_SOURCE_DIR}/assets/sotu")

# Chat templates and the Jinja engine: the goldens of tests/data/chat (transformers' renderings,
# scripts/chat_fixtures.sh) need assets/chat_templates from scripts/fetch_assets.sh and skip
# without it; the engine's own tests need nothing.
fsdp_unit_test(test_chat_template test_chat_template.cpp)
target_compile_definitions(test_chat_template PRIVATE
                           FSDP_CHAT_TEMPLATES_DIR="${PROJECT_SOURCE_DIR}/assets/chat_templates"
                           FSDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
