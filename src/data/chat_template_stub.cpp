// PLACEHOLDER until the template engine lands (branch jinja).
#include <stdexcept>

#include "fsdp/data/chat_template.h"

namespace fsdp::data {
ChatTemplate ChatTemplate::from_folder(const std::string& dir) {
  throw std::runtime_error(dir + ": chat templates are not rendered yet");
}
std::string ChatTemplate::render(const std::vector<ChatMessage>&, bool) const { return {}; }
}  // namespace fsdp::data
