#include "chat/jinja/budget.h"

namespace linnet::jinja::budget {
namespace {

thread_local Scope* installed = nullptr;
constexpr std::int64_t kPollEvery = 4096;   // steps between two calls of the cancel check
constexpr std::size_t kBytesPerStep = 16;  // what making values costs in steps

std::string mib(std::size_t bytes) {
  return bytes % (std::size_t{1} << 20) == 0 ? str(bytes >> 20, " MiB") : str(bytes, " bytes");
}

}  // namespace

Scope::Scope(const Limits& limits) : limits_(limits), next_poll_(kPollEvery), outer_(installed) { installed = this; }

Scope::~Scope() { installed = outer_; }

void steps(std::int64_t n) {
  Scope* s = installed;
  if (!s) return;
  s->steps_ += n;
  if (s->steps_ > s->limits_.max_steps)
    throw EvalError(str("the template ran past ", s->limits_.max_steps, " steps (the render limit max_steps)"));
  if (s->steps_ >= s->next_poll_) {
    s->next_poll_ = s->steps_ + kPollEvery;
    if (s->limits_.cancelled && s->limits_.cancelled()) throw Cancelled("the render was cancelled");
  }
}

void check_text(std::size_t bytes) {
  Scope* s = installed;
  if (s && bytes > s->limits_.max_bytes)
    throw EvalError(str("the template would make a text of more than ", mib(s->limits_.max_bytes),
                        " (the render limit max_bytes)"));
}

void built(std::size_t bytes) {
  if (installed) steps(std::int64_t(bytes / kBytesPerStep));
}

void built_text(std::size_t size, std::size_t added) {
  if (!installed) return;
  check_text(size);
  built(added);
}

void check_items(std::size_t count) {
  Scope* s = installed;
  if (s && count > s->limits_.max_bytes / sizeof(Value))
    throw EvalError(str("the template would make a list of ", count, " items, more than ", mib(s->limits_.max_bytes),
                        " (the render limit max_bytes; an item takes ", sizeof(Value), " bytes)"));
}

}  // namespace linnet::jinja::budget
