// Fuzz target: a sharded checkpoint's metadata.json (ckpt::metadata_from_json) and the 64-byte
// header every shard file opens with (ckpt::decode_header). Anything else is a CheckpointError;
// metadata it accepts serializes back to JSON that parses to the same metadata.
#include <cstring>
#include <string>

#include "checkpoint/format.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fsdp;
  if (size >= static_cast<size_t>(ckpt::kShardHeaderBytes)) {
    unsigned char header[ckpt::kShardHeaderBytes];
    std::memcpy(header, data, sizeof header);
    try {
      ckpt::ShardHeader h = ckpt::decode_header(header, "shard");
      unsigned char again[ckpt::kShardHeaderBytes];
      ckpt::encode_header(h, again);
      ckpt::ShardHeader h2 = ckpt::decode_header(again, "shard");
      fuzz::require(h2.version == h.version && h2.shard_rank == h.shard_rank &&
                        h2.shard_count == h.shard_count && h2.step == h.step,
                    "shard header round trip");
    } catch (const CheckpointError&) {
    }
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckpointMetadata meta;
  try {
    meta = ckpt::metadata_from_json(text, "metadata.json");
  } catch (const CheckpointError&) {
    return 0;
  }
  const std::string json = ckpt::metadata_to_json(meta);
  try {
    const std::string again = ckpt::metadata_to_json(ckpt::metadata_from_json(json, "again"));
    fuzz::require(again == json, "metadata round trip changed:\n" + json + "\n" + again);
  } catch (const CheckpointError& e) {
    fuzz::property_broken(std::string("metadata_to_json output refused: ") + e.what());
  }
  return 0;
}
