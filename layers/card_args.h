// Shorthands the card's tables are written with (layers/card.cpp, layers/card_blocks.cpp).
#pragma once
#include <string>
#include <vector>

#include "layers/card.h"

namespace linnet::card {

inline Arg tensor(std::string name, std::vector<std::string> dims, std::string dtype) {
  return Arg{std::move(name), std::move(dims), std::move(dtype), true};
}
inline Arg scalar(std::string name, std::string dtype) { return Arg{std::move(name), {}, std::move(dtype), false}; }
inline Arg result(std::vector<std::string> dims, std::string dtype) {
  return tensor("", std::move(dims), std::move(dtype));
}
inline Function fn(std::string kind, std::string name, std::string generics, std::vector<Arg> args, Arg res) {
  return Function{std::move(kind), std::move(name), std::move(generics), std::move(args), {std::move(res)}};
}
// Inputs shared by the packed entries.
inline std::vector<Arg> packed_args() {
  return {tensor("tokens", {"P"}, "i32"), tensor("positions", {"P"}, "i32"), tensor("segments", {"P"}, "i32")};
}

}  // namespace linnet::card
