// PLACEHOLDER until the template engine lands (branch jinja): the API examples.cpp calls.
#pragma once

#include <string>
#include <vector>

namespace fsdp::data {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  static ChatTemplate from_folder(const std::string& tokenizer_dir);
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
};

}  // namespace fsdp::data
