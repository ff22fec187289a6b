// Unicode Normalization Form C for the tokenizer's NFC normalizer (Qwen2's tokenizer.json has
// one): canonical decomposition, canonical ordering, canonical composition, with Hangul done
// algorithmically. The tables are generated from Python's unicodedata (unicode_nfc_tables.inc,
// gen_unicode_nfc.py; FSDP_UNICODE_NFC_VERSION names the Unicode version) so that no library is
// needed. Bytes that are not valid UTF-8 are kept as they are and block composition across them.
#pragma once

#include <string>
#include <string_view>

namespace fsdp::data {

std::string nfc(std::string_view text);

// The Unicode version of the tables, e.g. "14.0.0".
const char* nfc_unicode_version();

}  // namespace fsdp::data
