// Chat formats. See chat_template.hpp.
#include "tessera/serving/chat_template.hpp"

namespace tessera::serving {

namespace {
bool is_system(const chat_message& m) { return m.role == "system" || m.role == "developer"; }
}  // namespace

chat_format detect_chat_format(std::string_view t) {
  if (t.find("<|im_start|>") != std::string_view::npos) return chat_format::chatml;
  if (t.find("<|start_header_id|>") != std::string_view::npos) return chat_format::llama3;
  if (t.find("[INST]") != std::string_view::npos) return chat_format::llama2;
  if (t.find("<|user|>") != std::string_view::npos) return chat_format::zephyr;
  return chat_format::plain;
}

chat_format chat_format_for(std::string_view t, std::string_view architecture_default) {
  if (!t.empty()) return detect_chat_format(t);
  return chat_format_named(architecture_default).value_or(chat_format::plain);
}

std::optional<chat_format> chat_format_named(std::string_view n) {
  for (auto f : {chat_format::plain, chat_format::chatml, chat_format::llama3, chat_format::llama2,
                 chat_format::zephyr})
    if (chat_format_name(f) == n) return f;
  return std::nullopt;
}

std::string_view chat_format_name(chat_format f) {
  switch (f) {
    case chat_format::chatml: return "chatml";
    case chat_format::llama3: return "llama3";
    case chat_format::llama2: return "llama2";
    case chat_format::zephyr: return "zephyr";
    default: return "plain";
  }
}

std::string render_chat(chat_format f, const std::vector<chat_message>& messages) {
  std::string out;
  switch (f) {
    case chat_format::chatml:
      for (const auto& m : messages)
        out += "<|im_start|>" + (is_system(m) ? std::string("system") : m.role) + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case chat_format::llama3:
      for (const auto& m : messages)
        out += "<|start_header_id|>" + (is_system(m) ? std::string("system") : m.role) + "<|end_header_id|>\n\n" +
               m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case chat_format::zephyr:
      for (const auto& m : messages)
        out += "<|" + (is_system(m) ? std::string("system") : m.role) + "|>\n" + m.content + "</s>\n";
      return out + "<|assistant|>\n";
    case chat_format::llama2: {
      std::string system;
      bool first_user = true;
      for (const auto& m : messages) {
        if (is_system(m)) {
          system += (system.empty() ? "" : "\n") + m.content;
        } else if (m.role == "user") {
          if (!first_user) out += "<s>";
          out += "[INST] ";
          if (first_user && !system.empty()) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
          out += m.content + " [/INST]";
          first_user = false;
        } else {
          out += " " + m.content + " </s>";
        }
      }
      return out;
    }
    default:
      for (const auto& m : messages) {
        if (is_system(m))
          out += m.content + "\n\n";
        else
          out += (m.role == "user" ? "User: " : "Assistant: ") + m.content + "\n";
      }
      return out + "Assistant:";
  }
}

}  // namespace tessera::serving
