// tessera/serving/chat_template.hpp: turning chat messages into a decoder's prompt text.
//
// tessera does not run Jinja: a checkpoint's chat template (tokenizer_config.json
// "chat_template") is recognised by its markers as one of the common formats and rendered by
// tessera's own code; a template that is none of them, or no template, gets the documented plain
// default. `--chat-template` picks a format by name.
//
//   chatml   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//            (marker "<|im_start|>": Qwen, many fine-tunes)
//   llama3   <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//            <|start_header_id|>assistant<|end_header_id|>\n\n   (marker "<|start_header_id|>")
//   llama2   [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//            (marker "[INST]": Llama-2-chat, Mistral-instruct; a system message joins the first
//            user turn)
//   zephyr   <|system|>\n{content}</s>\n<|user|>\n{content}</s>\n ... <|assistant|>\n
//            (marker "<|user|>")
//   plain    (the default) "{content}\n\n" for a system message, then "User: {content}\n" and
//            "Assistant: {content}\n" per turn, ending "Assistant:"
// The beginning-of-sequence token is not part of the text: the tokenizer adds it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::serving {

enum class chat_format { plain, chatml, llama3, llama2, zephyr };

struct chat_message {
  std::string role;  ///< system (or developer), user, assistant
  std::string content;
};

/// The format a Jinja chat template is recognised as (plain when none matches or it is empty).
chat_format detect_chat_format(std::string_view jinja_template);
/// The format of a checkpoint's template; with no template, the architecture's default (its traits'
/// chat_format name, models/shape.hpp), plain when that names none.
chat_format chat_format_for(std::string_view jinja_template, std::string_view architecture_default);
/// By name (plain, chatml, llama3, llama2, zephyr); nullopt for another name.
std::optional<chat_format> chat_format_named(std::string_view name);
std::string_view chat_format_name(chat_format f);
/// The prompt text for `messages`, ending where the assistant's answer starts.
std::string render_chat(chat_format f, const std::vector<chat_message>& messages);

}  // namespace tessera::serving
