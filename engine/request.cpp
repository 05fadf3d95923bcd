#include "engine/request.h"

namespace linnet::engine {

using nlohmann::json;

json to_json(const SamplingParams& p) {
  return {{"max_new", p.max_new_tokens}, {"temperature", p.temperature}, {"top_k", p.top_k}, {"top_p", p.top_p},
          {"min_p", p.min_p}, {"seed", p.seed}, {"ignore_eos", p.ignore_eos},
          {"repetition_penalty", p.repetition_penalty}, {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty}, {"logit_bias", p.logit_bias}, {"min_tokens", p.min_tokens},
          {"bad_words", p.bad_words}, {"stop_token_ids", p.stop_token_ids}, {"priority", p.priority}};
}

SamplingParams sampling_from_json(const json& j) {
  SamplingParams p;
  p.max_new_tokens = j.at("max_new").get<int64_t>();
  p.temperature = j.at("temperature").get<float>();
  p.top_k = j.at("top_k").get<int64_t>();
  p.top_p = j.at("top_p").get<float>();
  p.min_p = j.at("min_p").get<float>();
  p.seed = j.at("seed").get<uint64_t>();
  p.ignore_eos = j.at("ignore_eos").get<bool>();
  p.repetition_penalty = j.at("repetition_penalty").get<float>();
  p.presence_penalty = j.at("presence_penalty").get<float>();
  p.frequency_penalty = j.at("frequency_penalty").get<float>();
  p.logit_bias = j.at("logit_bias").get<std::vector<std::pair<int32_t, float>>>();
  p.min_tokens = j.at("min_tokens").get<int64_t>();
  p.bad_words = j.at("bad_words").get<std::vector<std::vector<int32_t>>>();
  p.stop_token_ids = j.at("stop_token_ids").get<std::vector<int32_t>>();
  p.priority = j.at("priority").get<int64_t>();
  return p;
}

}  // namespace linnet::engine
